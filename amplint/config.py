"""The configuration -> one Settings.

Found as ruff finds its own: in the directory of the paths checked and each
one above it, the first of `.amplint.toml`, `amplint.toml` (keys at the top
level) and a `pyproject.toml` with a ``[tool.amplint]`` table.  Command-line
options and `--config KEY=VALUE` overrides are laid over it."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from amplint.files import (
    DEFAULT_EXCLUDES,
    NotARegularFile,
    note_skipped,
    read_regular,
    repository_top,
)
from amplint.globs import GlobError, PatternList
from amplint.triggers import UNUSED_NOQA

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on old Pythons only
    import tomli as tomllib

DEFAULT_TARGET_TORCH = (2, 4)
DEFAULT_FILE_LINE_LIMIT = 200_000
DEFAULT_FILE_TIME_LIMIT = 120.0
DTYPES = ("float16", "bfloat16", "auto")
_DEVICE_TYPE = re.compile(r"[a-z][a-z0-9_]*")


class ConfigError(Exception):
    """Bad configuration; the message names the file and key."""


@dataclass(frozen=True)
class Settings:
    """What a run checks and how: the configuration and the command line, merged."""

    root: Path = field(default_factory=Path.cwd)
    config_file: Path | None = None
    select: tuple[str, ...] = ("AMP",)
    ignore: tuple[str, ...] = ()
    # Added to select / ignore, as ruff's extend-select and extend-ignore.
    extend_select: tuple[str, ...] = ()
    extend_ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES
    extend_exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Oldest torch the user's project must keep running on; fixes that need a
    # newer torch.amp API are not offered below it.
    target_torch: tuple[int, int] = DEFAULT_TARGET_TORCH
    # Where target-torch came from: "default", the configuration that set it,
    # or the requirement the project declares (`requirements.txt: torch>=1.8`).
    target_torch_source: str = "default"
    # What AMP001 inserts: float16 (autocast + GradScaler), bfloat16 (autocast
    # only) or auto (bf16 where the GPU supports it, else fp16 with a scaler).
    dtype: str = "float16"
    device_type: str = "cuda"
    # A file's budget: more lines are not parsed, more seconds of analysis
    # stop it; each such file gets a one-line error and the run goes on.
    # Far above real code (torch's largest module has under 30,000 lines and
    # takes seconds); a million blank lines took libcst 10 s.
    file_line_limit: int = DEFAULT_FILE_LINE_LIMIT
    file_time_limit: float = DEFAULT_FILE_TIME_LIMIT
    # Which fixes may be applied (and are shown fixable): ruff's keys.  None:
    # every rule's; `unfixable` wins over `fixable`.
    unsafe_fixes: bool = False
    fixable: tuple[str, ...] | None = None
    unfixable: tuple[str, ...] = ()
    # Whether discovery skips what git ignores (.gitignore, .git/info/exclude,
    # the user's core.excludesFile) and what `.ignore` files name, as ruff does.
    respect_gitignore: bool = True
    # Whether test files (`test_*.py`, `*_test.py`, `conftest.py`, anything
    # under a `tests/` or `test/` directory) get the fixes that change the
    # numerics of training; off, they are reported and left as they are.
    rewrite_tests: bool = False
    # Set per file by the engine: this file is a test file (see rewrite_tests).
    test_file: bool = False
    # Whether the configuration was found rather than named (--config FILE,
    # --isolated): each file then gets the one closest to it, with the
    # command-line options these settings were resolved with over it
    # (amplint.settings.FileSettings).
    closest_configuration: bool = False
    command_options: tuple[tuple[str, Any], ...] = ()
    # Where each value set by something other than the defaults came from, by
    # its key as a configuration spells it (`--show-settings`).
    origins: tuple[tuple[str, str], ...] = ()

    def origin(self, key: str) -> str:
        """Where the value of `key` came from: a configuration file (`a + b`
        where an `extend-` key added to a base's), an option, or "default"."""
        return dict(self.origins).get(key, "default")

    def set_by(self, key: str, origin: str, adds: bool = False) -> Settings:
        """These settings, `key`'s value said to come from `origin` (after
        what set it before, where `adds`)."""
        origins = dict(self.origins)
        if adds and key in origins:
            origin = f"{origins[key]} + {origin}"
        origins[key] = origin
        return replace(self, origins=tuple(origins.items()))

    @property
    def target_torch_shown(self) -> str:
        """target-torch for a message: `1.8 (requirements.txt: torch>=1.8)`."""
        version = ".".join(map(str, self.target_torch))
        if self.target_torch_source == "default":
            return version
        return f"{version} ({self.target_torch_source})"

    @property
    def all_excludes(self) -> tuple[str, ...]:
        return self.exclude + self.extend_exclude

    def fix_allowed(self, code: str) -> bool:
        """Whether a finding of `code` may carry its fix (`fixable`, `unfixable`)."""
        fixable = self.fixable is None or _matches(code, self.fixable)
        return fixable and not _matches(code, self.unfixable)

    def is_test_file(self, path: Path) -> bool:
        """`test_*.py`, `*_test.py`, `conftest.py`, or a file under a `tests/` or
        `test/` directory below the root (the root's own parents do not count)."""
        try:
            parts = path.resolve().relative_to(self.root.resolve()).parts
        except ValueError:
            parts = path.parts[-2:]  # outside the root: its own directory only
        name = parts[-1] if parts else path.name
        return (
            name.startswith("test_")
            or name.endswith("_test.py")
            or name == "conftest.py"
            or any(part in ("tests", "test") for part in parts[:-1])
        )

    def enabled_codes(self, known_codes: Iterable[str], path: Path | None = None) -> frozenset[str]:
        ignore = self.ignore + self.extend_ignore
        if path is not None and self.per_file_ignores:
            ignore += tuple(self._per_file_ignores_for(path))
        return _enabled(tuple(known_codes), self.select + self.extend_select, ignore)

    def _per_file_ignores_for(self, path: Path) -> list[str]:
        try:
            relative = path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            relative = path.as_posix()
        codes: list[str] = []
        for pattern, ignored in self.per_file_ignores:
            # `!pattern`, as in ruff: the files the pattern does not match.
            negated = pattern.startswith("!")
            if _per_file_pattern(pattern.removeprefix("!")).matches(relative) != negated:
                codes += ignored
        return codes


@lru_cache(maxsize=None)
def _per_file_pattern(pattern: str) -> PatternList:
    """A per-file-ignores pattern: gitignore-style from the configuration's
    directory, and (unless it starts with `/`) at any depth below it too, so
    that `tests/*` also covers `pkg/tests/x.py`."""
    lines = [pattern] if pattern.startswith("/") else [pattern, f"**/{pattern}"]
    return PatternList(lines, strict=True)


# Asked once per file a run finds, almost always with the same selection: a
# warm run of 2,328 files spent 35 ms recomputing it.
@lru_cache(maxsize=256)
def _enabled(
    known_codes: tuple[str, ...], select: tuple[str, ...], ignore: tuple[str, ...]
) -> frozenset[str]:
    return frozenset(
        code
        for code in known_codes
        if (code in select if code in OPT_IN_CODES else _matches(code, select))
        and not _matches(code, ignore)
    )


# Codes a prefix does not select (`AMP`, the default, or `AMP9`): only their
# own code does, in select or extend-select, as ruff's RUF100 is off unless asked.
OPT_IN_CODES = frozenset({UNUSED_NOQA})


def _matches(code: str, selectors: Iterable[str]) -> bool:
    return any(code.startswith(selector) for selector in selectors)


_SELECTOR = re.compile(r"^[A-Z]+[0-9]*$")


def parse_selectors(
    value: Any, key: str, where: str, known_codes: Iterable[str]
) -> tuple[str, ...]:
    """Validate a list of codes or prefixes such as ``AMP2``; each must name a rule."""
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        items = [item.strip() for item in value]
    else:
        raise ConfigError(f"{where}: `{key}` must be a list of rule codes or prefixes")
    known = list(known_codes)
    for item in items:
        if item.upper() == "ALL":
            continue
        if not _SELECTOR.match(item) or not any(code.startswith(item) for code in known):
            raise ConfigError(
                f"{where}: `{key}` names `{item}`, which matches no rule "
                f"(known: {', '.join(sorted(known))})"
            )
    return tuple("AMP" if item.upper() == "ALL" else item for item in items)


def parse_torch_version(value: Any, where: str) -> tuple[int, int]:
    # Bounded digits: int() refuses more than 4,300 of them, and no torch has 5.
    version = r"([0-9]{1,4})\.([0-9]{1,4})(?:\.[0-9]{1,4})?"
    match = re.fullmatch(version, value) if isinstance(value, str) else None
    if match is None:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ConfigError(
            f'{where}: `target-torch` must be a version string such as "2.4", got {shown}'
        )
    return int(match.group(1)), int(match.group(2))


def parse_dtype(value: Any, where: str) -> str:
    if value not in DTYPES:
        raise ConfigError(f"{where}: `dtype` must be one of {', '.join(DTYPES)}, got {value!r}")
    return value


def parse_device_type(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _DEVICE_TYPE.fullmatch(value):
        raise ConfigError(
            f'{where}: `device-type` must be a torch device type such as "cuda", got {value!r}'
        )
    return value


def _string_list(value: Any, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return tuple(value)


def _patterns(value: Any, key: str, where: str) -> tuple[str, ...]:
    """A list of gitignore-style patterns, each a valid glob."""
    patterns = _string_list(value, key, where)
    for pattern in patterns:
        _check_pattern(pattern, key, where)
    return patterns


def parse_patterns(value: str, key: str, where: str) -> tuple[str, ...]:
    """Comma-separated gitignore-style patterns from the command line."""
    return _patterns([item.strip() for item in value.split(",") if item.strip()], key, where)


def parse_per_file_ignore(value: str, known_codes: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """`--per-file-ignores PATTERN:CODES`, as one entry of the table."""
    pattern, colon, codes = value.rpartition(":")
    where = "--per-file-ignores"
    if not colon or not pattern.strip() or not codes.strip():
        raise ConfigError(f"{where}: `{value}` is not PATTERN:CODES, as in `tests/*:AMP001,AMP2`")
    _check_pattern(pattern.strip().removeprefix("!"), "per-file-ignores", where)
    return pattern.strip(), parse_selectors(
        codes, f"per-file-ignores {pattern}", where, known_codes
    )


def _check_pattern(pattern: str, key: str, where: str) -> None:
    try:
        PatternList([pattern], strict=True)
    except GlobError as error:
        raise ConfigError(f"{where}: `{key}` holds `{pattern}`, not a valid pattern: {error}")


# In each directory, the first of these that is there (and, for
# pyproject.toml, has a [tool.amplint] table) is the configuration.
CONFIG_NAMES = (".amplint.toml", "amplint.toml", "pyproject.toml")


def find_config(start: Path) -> Path | None:
    """The nearest configuration at or above `start` (see CONFIG_NAMES).  Found,
    not named: one that is not a regular file, or links out of its project,
    is passed over with a note (`files.read_regular`)."""
    start = start.resolve()
    directory = start if start.is_dir() else start.parent
    for candidate in [directory, *directory.parents]:
        config = config_in(candidate)
        if config is not None:
            return config
    return None


def config_in(directory: Path) -> Path | None:
    """The configuration in `directory` itself (resolved), as find_config
    looks for it there; None without one."""
    if not any(os.path.lexists(directory / name) for name in CONFIG_NAMES):
        return None  # most directories: not worth finding the repository above
    return _config_in(directory, within=repository_top(directory))


def user_config() -> Path | None:
    """The user's own configuration, used where no project has one (ruff's
    user-level ruff.toml): the first of CONFIG_NAMES in
    `$XDG_CONFIG_HOME/amplint` (by default `~/.config/amplint`)."""
    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "amplint"
    return _config_in(home)


def _config_in(directory: Path, within: Path | None = None) -> Path | None:
    """The first of CONFIG_NAMES in `directory` that is a configuration;
    `within`, the project a link in it may not lead out of."""
    for name in CONFIG_NAMES:
        config = directory / name
        if not os.path.lexists(config):
            continue
        try:
            data = read_regular(config, within=within)
        except OSError as error:
            note_skipped(error)
            continue
        if name != "pyproject.toml" or _has_amplint_table(data):
            return config
    return None


def _has_amplint_table(pyproject: bytes) -> bool:
    try:
        text = pyproject.decode("utf-8")
    except UnicodeDecodeError:
        return False
    # [ \t], not \s: \s spans lines, and a run of blank lines was retried from
    # each of them (200,000 blank lines took 38 s).
    return re.search(r"^[ \t]*\[[ \t]*tool[ \t]*\.[ \t]*amplint\b", text, re.M) is not None


def load_settings(
    config_file: Path | None,
    known_codes: Iterable[str],
    overrides: Iterable[str] = (),
    root: Path | None = None,
) -> Settings:
    """Settings from `config_file`, or defaults, with each `KEY = VALUE`
    override (TOML, as `--config` takes it) laid over its key.

    `config_file` is an amplint.toml (keys at the top level) or a
    pyproject-style file (whatever its name) whose keys are under
    ``[tool.amplint]``.  Patterns are relative to `root`: by default the
    configuration's directory (the working directory without one)."""
    table: dict[str, Any] = {}
    where = "defaults"
    if root is None:
        root = config_file.parent if config_file is not None else Path.cwd()
    known_codes = list(known_codes)
    base = None
    if config_file is not None:
        table, where = _read_table(config_file)
        base = _extended(table, config_file, where, known_codes, root, seen=[])
    key_origins = {key: where for key in table}
    for override in overrides:
        pair = parse_override(override)
        table.update(pair)
        key_origins.update((key, f"--config {override}") for key in pair)
        where = f"{where}, --config {override}"
    return _settings_from_table(table, where, root, known_codes, config_file, base, key_origins)


# How many configurations an `extend` chain may hold.
MAX_EXTENDS = 16


def _extended(
    table: dict[str, Any],
    config_file: Path,
    where: str,
    known_codes: list[str],
    root: Path,
    seen: list[Path],
) -> Settings | None:
    """The settings `table`'s `extend` names (ruff's key: a configuration this
    one is laid over), resolved first; None without one.  Its patterns are
    read from `root`, the configuration being resolved, not its own folder."""
    if "extend" not in table:
        return None
    value = table.pop("extend")
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: `extend` must be the path of a configuration file")
    path = Path(os.path.expandvars(os.path.expanduser(value)))
    path = (config_file.parent / path).resolve()
    chain = [*seen, config_file.resolve()]
    if path in chain:
        raise ConfigError(f"{where}: `extend` goes round: {' -> '.join(map(str, chain + [path]))}")
    if len(chain) >= MAX_EXTENDS:
        raise ConfigError(f"{where}: `extend` chains more than {MAX_EXTENDS} configurations")
    base_table, base_where = _read_table(path)
    base = _extended(base_table, path, base_where, known_codes, root, chain)
    return _settings_from_table(base_table, base_where, root, known_codes, path, base)


def _read_table(config_file: Path) -> tuple[dict[str, Any], str]:
    where = str(config_file)
    try:
        document = tomllib.loads(read_regular(config_file).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except (IsADirectoryError, NotARegularFile) as error:
        if config_file.is_dir():
            raise ConfigError(f"{where}: a directory, not a configuration file") from None
        raise ConfigError(f"{where}: cannot read: {error.args[0]}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{where}: cannot read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{where}: invalid TOML: {error}") from None
    except RecursionError:  # tomllib recurses once per level of nesting
        raise ConfigError(f"{where}: invalid TOML: nested too deeply to read") from None
    tool = document.get("tool")
    if config_file.name == "pyproject.toml" or (isinstance(tool, dict) and "amplint" in tool):
        table = tool.get("amplint", {}) if isinstance(tool, dict) else {}
        where = f"{where} [tool.amplint]"
    else:
        table = document
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table")
    return dict(table), where


def parse_override(text: str) -> dict[str, Any]:
    """One `--config KEY=VALUE` override: a TOML key-value pair naming one key."""
    try:
        pair = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(
            f"--config {text}: not a file, nor a TOML `KEY = VALUE` override ({error})"
        ) from None
    if len(pair) != 1:
        raise ConfigError(f'--config {text}: an override sets one key, as in `select = ["AMP1"]`')
    return pair


_KEYS = {
    "dtype",
    "device-type",
    "select",
    "ignore",
    "extend-select",
    "extend-ignore",
    "exclude",
    "extend-exclude",
    "per-file-ignores",
    "extend-per-file-ignores",
    "extend",
    "target-torch",
    "file-line-limit",
    "file-time-limit",
    "respect-gitignore",
    "rewrite-tests",
    "unsafe-fixes",
    "fixable",
    "unfixable",
}


def _settings_from_table(
    table: Mapping[str, Any],
    where: str,
    root: Path,
    known_codes: Iterable[str],
    config_file: Path | None,
    base: Settings | None = None,
    key_origins: Mapping[str, str] | None = None,
) -> Settings:
    """`table`'s keys laid over `base` (the configuration it extends), else
    over the defaults: a key replaces the base's value, an `extend-` key adds
    to it.  Each key's origin is `key_origins`' (else `where`)."""
    known = list(known_codes)
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key `{unknown[0]}` (known keys: {', '.join(sorted(_KEYS))})"
        )
    if base is None:
        settings = Settings(root=root, config_file=config_file)
    else:
        settings = replace(base, root=root, config_file=config_file)
    if "select" in table:
        settings = replace(
            settings, select=parse_selectors(table["select"], "select", where, known)
        )
    if "ignore" in table:
        settings = replace(
            settings, ignore=parse_selectors(table["ignore"], "ignore", where, known)
        )
    for key in ("extend-select", "extend-ignore"):
        if key in table:
            codes = parse_selectors(table[key], key, where, known)
            field = key.replace("-", "_")
            settings = replace(settings, **{field: getattr(settings, field) + codes})
    if "exclude" in table:
        settings = replace(settings, exclude=_patterns(table["exclude"], "exclude", where))
    if "extend-exclude" in table:
        settings = replace(
            settings,
            extend_exclude=settings.extend_exclude
            + _patterns(table["extend-exclude"], "extend-exclude", where),
        )
    # extend-per-file-ignores adds to per-file-ignores, as in ruff.
    for key in ("per-file-ignores", "extend-per-file-ignores"):
        if key not in table:
            continue
        value = table[key]
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: `{key}` must be a table of pattern = [codes]")
        for pattern in value:
            _check_pattern(pattern.removeprefix("!"), key, where)
        entries = tuple(
            (pattern, parse_selectors(codes, f"{key}.{pattern}", where, known))
            for pattern, codes in value.items()
        )
        # per-file-ignores replaces what a base set; extend-per-file-ignores adds.
        kept = settings.per_file_ignores if key.startswith("extend-") else ()
        settings = replace(settings, per_file_ignores=kept + entries)
    if "dtype" in table:
        settings = replace(settings, dtype=parse_dtype(table["dtype"], where))
    if "device-type" in table:
        settings = replace(settings, device_type=parse_device_type(table["device-type"], where))
    if "target-torch" in table:
        settings = replace(
            settings,
            target_torch=parse_torch_version(table["target-torch"], where),
            target_torch_source=where,
        )
    if "file-line-limit" in table:
        limit = _positive(table["file-line-limit"], "file-line-limit", where, int)
        settings = replace(settings, file_line_limit=int(limit))
    if "file-time-limit" in table:
        limit = _positive(table["file-time-limit"], "file-time-limit", where, (int, float))
        if limit > MAX_FILE_TIME_LIMIT:
            # The workers' selector waits in milliseconds of a C int: 24 days.
            raise ConfigError(
                f"{where}: `file-time-limit` must be at most {MAX_FILE_TIME_LIMIT:,} seconds "
                f"(a day), got {limit!r}"[:300]
            )
        settings = replace(settings, file_time_limit=float(limit))
    for key in ("respect-gitignore", "rewrite-tests", "unsafe-fixes"):
        if key in table:
            value = table[key]
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: `{key}` must be true or false, got {value!r}"[:300])
            settings = replace(settings, **{key.replace("-", "_"): value})
    for key in ("fixable", "unfixable"):
        if key in table:
            codes = parse_selectors(table[key], key, where, known)
            settings = replace(settings, **{key: codes})
    for key in table:
        origin = (key_origins or {}).get(key, where)
        if key == "extend-per-file-ignores":
            settings = settings.set_by("per-file-ignores", origin, adds=True)
        else:
            settings = settings.set_by(key, origin, adds=key.startswith("extend-"))
    return settings


MAX_FILE_TIME_LIMIT = 86_400


def _positive(value: Any, key: str, where: str, kinds) -> int | float:
    if isinstance(value, bool) or not isinstance(value, kinds) or not 0 < value < 1e9:
        raise ConfigError(f"{where}: `{key}` must be a positive number, got {value!r}"[:300])
    return value
