"""Published definitions the output formats are held to, fetched from the
registry that publishes them (never committed: they are not ours), pinned by
version and by hash, and kept in the test environment once fetched."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# SARIF 2.1.0's JSON schema as Microsoft's SARIF SDK publishes it (the copy
# SchemaStore serves as sarif-2.1.0), in an npm package of theirs that
# validates logs with it; PyPI carries no copy of the final schema.
SARIF_PACKAGE = "@microsoft/sarif-matcher-utils@1.0.0-beta.0"
SARIF_MEMBER = "package/lib/schemas/sarif-2.1.0-rtm.5.json"
SARIF_SHA256 = "2d99159ae54a3eea97f81781cff48780548657c35949f4b7f25e99a2ba4de4f8"

KEPT = Path(sys.prefix) / "share" / "amplint-tests"


def sarif_schema() -> dict:
    """The SARIF 2.1.0 schema; fetched with `npm pack` the first time."""
    return json.loads(_published(SARIF_PACKAGE, SARIF_MEMBER, SARIF_SHA256))


def _published(package: str, member: str, sha256: str) -> bytes:
    kept = KEPT / Path(member).name
    if kept.exists() and hashlib.sha256(kept.read_bytes()).hexdigest() == sha256:
        return kept.read_bytes()
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(f"the tests fetch {package} with npm, which is not on PATH")
    with tempfile.TemporaryDirectory() as scratch:
        packed = subprocess.run(
            [npm, "pack", "--silent", package],
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if packed.returncode != 0:
            raise RuntimeError(f"npm pack {package}: {packed.stderr.strip()}")
        tarball = Path(scratch) / packed.stdout.split()[-1]
        with tarfile.open(tarball) as archive:
            extracted = archive.extractfile(member)
            assert extracted is not None, f"{package} holds no {member}"
            data = extracted.read()
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        raise RuntimeError(f"{package}'s {member} is not the one pinned ({found})")
    KEPT.mkdir(parents=True, exist_ok=True)
    temporary = kept.with_suffix(".partial")
    temporary.write_bytes(data)
    temporary.replace(kept)
    return data


if __name__ == "__main__":
    sarif_schema()
