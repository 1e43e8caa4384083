"""The AMP203 fix: a module written against NVIDIA apex.amp, migrated to torch.amp.

migration.py drives it (scaler, branches, steps); functions.py migrates apex's
per-function casts; common.py holds what both use.
"""

from amplint.transforms.apex.common import MigrationBlocked
from amplint.transforms.apex.migration import ApexMigration, migrate_apex

__all__ = ["ApexMigration", "MigrationBlocked", "migrate_apex"]
