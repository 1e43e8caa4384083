"""Files beside the code that choose a framework's precision.

`accelerate launch` reads `mixed_precision` from the config file `accelerate
config` writes (a YAML file the project often keeps: `configs/fsdp.yaml`) or
from `--mixed_precision` on its command line (a launch script): an
`Accelerator()` without the argument then still trains in mixed precision.
DeepSpeed reads the JSON file `deepspeed.initialize(config="ds.json")` or
`TrainingArguments(deepspeed="ds.json")` names.  These are read as text, never
executed; what a run reads is recorded like a module (ProjectView.consulted).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from amplint.files import read_regular

# The files a launch setting may live in: accelerate's YAML configs and the
# shell scripts that call `accelerate launch`.
LAUNCH_SUFFIXES = (".yaml", ".yml", ".sh", ".bash")
_LAUNCH_PRECISION = re.compile(
    r"""^[ \t]*mixed_precision[ \t]*:[ \t]*["']?(no|fp16|bf16|fp8)\b"""
    r"""|--mixed[_-]precision(?:[ \t]*=[ \t]*|[ \t]+)["']?(no|fp16|bf16|fp8)\b""",
    re.M,
)
# Where a project keeps launch configs for scripts above them.
CONFIG_DIRECTORIES = frozenset({"configs", "config", "accelerate_configs", "scripts"})


@dataclass(frozen=True)
class LaunchPrecision:
    """A launch config or script of the project that sets Accelerate's precision."""

    path: Path
    line: int
    precision: str  # "no", "fp16", "bf16", "fp8"
    digest: str  # of the file's bytes, for the cache (ProjectView.consulted)

    @property
    def enabled(self) -> bool:
        return self.precision != "no"

    def applies_to(self, module: Path, root: Path) -> bool:
        """Whether the config is near enough to `module` to be the one its
        launch reads: in the module's directory or below it, in a directory
        above it (up to the root), or in a `configs/` (`scripts/`, ...) of one.
        An example directory's config says nothing of its sibling's scripts."""
        here = module.parent
        folder = self.path.parent
        if folder.is_relative_to(here):
            return True
        for above in (here, *here.parents):
            if folder == above or (folder.parent == above and folder.name in CONFIG_DIRECTORIES):
                return True
            if above == root:
                break
        return False


@dataclass(frozen=True)
class ConfigFile:
    """A configuration file of the project, as read."""

    path: Path
    data: bytes

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def read_config_file(path: Path, root: Path) -> ConfigFile | None:
    """A regular file within the read limit (never a FIFO), or None; None too
    for a link from inside the project `root` to a file outside it (a config
    the code names outside the project, `/etc/ds.json`, is read as named)."""
    lexical = os.path.normpath(os.path.join(root, path))
    within = root if Path(lexical).is_relative_to(root) else None
    try:
        return ConfigFile(path.resolve(), read_regular(path, within=within))
    except (OSError, RuntimeError):
        return None


def launch_precision_in(config: ConfigFile) -> LaunchPrecision | None:
    """Where `config`'s text sets Accelerate's mixed precision, or None."""
    if b"mixed" not in config.data:
        return None
    text = config.data.decode("utf-8", errors="replace")
    match = _LAUNCH_PRECISION.search(text)
    if match is None:
        return None
    line = text.count("\n", 0, match.start()) + 1
    return LaunchPrecision(config.path, line, match.group(1) or match.group(2), config.digest)


def json_object(data: bytes) -> dict | None:
    """The top-level object of a JSON file, or None if it holds none."""
    try:
        contents = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return contents if isinstance(contents, dict) else None
