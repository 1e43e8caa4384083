"""How a run's settings are resolved, as ruff resolves them: the configuration
found from the paths (else the user's own), the oldest torch the project
declares, the command line's options over them; and for each file, the
configuration closest to it with the same options over it."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Sequence, Union

from amplint.config import (
    ConfigError,
    Settings,
    config_in,
    find_config,
    load_settings as _load_configuration,
    parse_device_type,
    parse_patterns,
    parse_per_file_ignore,
    parse_selectors,
    user_config,
)
from amplint.declared_torch import with_declared_torch
from amplint.files import real_path
from amplint.triggers import ALL_CODES


# A path as callers spell one, and the paths a run is given.
StrPath = Union[str, "os.PathLike[str]"]
PathsLike = Union[StrPath, Sequence[StrPath]]


def as_paths(paths: PathsLike) -> list[Path]:
    """`paths` as Paths: each a `str` or `os.PathLike`, or one of them alone
    (`check_paths("src")` is one path, not three of one letter)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found = []
    for path in paths:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"a path is a str or os.PathLike, not {type(path).__name__}")
        found.append(Path(os.fspath(path)))
    return found


def load_settings(
    paths: PathsLike = (),
    *,
    config: tuple[str, ...] = (),
    select: str | None = None,
    ignore: str | None = None,
    extend_select: str | None = None,
    extend_ignore: str | None = None,
    exclude: str | None = None,
    extend_exclude: str | None = None,
    per_file_ignores: tuple[str, ...] = (),
    dtype: str | None = None,
    device_type: str | None = None,
    respect_gitignore: bool | None = None,
    isolated: bool = False,
) -> Settings:
    """The settings a run over `paths` gets, as the command line resolves
    them: the configuration found from the paths' common directory (else the
    user's own), the oldest torch the project declares, then the options, each
    spelled as its command-line option.  Raises ConfigError naming the key.
    `paths` are `str` or `os.PathLike`, or one of them alone."""
    paths = as_paths(paths)
    config_file, overrides = _config_and_overrides(config)
    config_file_named = config_file
    if isolated and config_file is not None:
        raise ConfigError(f"--isolated reads no configuration file; --config names {config_file}")
    start = Path(os.path.commonpath([real_path(p) for p in paths])) if paths else Path.cwd()
    root = None
    if config_file is None and not isolated:
        config_file = find_config(start)
        if config_file is None:  # no project's: the user's own, its patterns from here
            config_file, root = user_config(), Path.cwd()
    loaded = _load_configuration(config_file, ALL_CODES, overrides, root=root)
    # Where no configuration chose target-torch: the oldest torch the project declares.
    settings = with_declared_torch(loaded, start)
    if settings.target_torch_source != loaded.target_torch_source:
        settings = settings.set_by("target-torch", settings.target_torch_source)
    if select is not None:  # replaces the configuration's selection, extend-select too
        codes = parse_selectors(select, "select", "--select", ALL_CODES)
        settings = replace(settings, select=codes, extend_select=()).set_by("select", "--select")
        settings = settings.set_by("extend-select", "--select")
    if ignore is not None:
        codes = parse_selectors(ignore, "ignore", "--ignore", ALL_CODES)
        settings = replace(settings, ignore=codes).set_by("ignore", "--ignore")
    if extend_select is not None:
        codes = parse_selectors(extend_select, "extend-select", "--extend-select", ALL_CODES)
        settings = replace(settings, extend_select=settings.extend_select + codes)
        settings = settings.set_by("extend-select", "--extend-select", adds=True)
    if extend_ignore is not None:
        codes = parse_selectors(extend_ignore, "extend-ignore", "--extend-ignore", ALL_CODES)
        settings = replace(settings, extend_ignore=settings.extend_ignore + codes)
        settings = settings.set_by("extend-ignore", "--extend-ignore", adds=True)
    if exclude is not None:
        patterns = parse_patterns(exclude, "exclude", "--exclude")
        settings = replace(settings, exclude=patterns).set_by("exclude", "--exclude")
    if extend_exclude is not None:
        patterns = parse_patterns(extend_exclude, "extend-exclude", "--extend-exclude")
        settings = replace(settings, extend_exclude=settings.extend_exclude + patterns)
        settings = settings.set_by("extend-exclude", "--extend-exclude", adds=True)
    if per_file_ignores:
        pairs = tuple(parse_per_file_ignore(value, ALL_CODES) for value in per_file_ignores)
        settings = replace(settings, per_file_ignores=settings.per_file_ignores + pairs)
        settings = settings.set_by("per-file-ignores", "--per-file-ignores", adds=True)
    if dtype is not None:
        settings = replace(settings, dtype=dtype).set_by("dtype", "--dtype")
    if device_type is not None:
        chosen = parse_device_type(device_type, "--device-type")
        settings = replace(settings, device_type=chosen).set_by("device-type", "--device-type")
    if respect_gitignore is not None:
        option = "--respect-gitignore" if respect_gitignore else "--no-respect-gitignore"
        settings = replace(settings, respect_gitignore=respect_gitignore)
        settings = settings.set_by("respect-gitignore", option)
    given = {
        "config": config,
        "select": select,
        "ignore": ignore,
        "extend_select": extend_select,
        "extend_ignore": extend_ignore,
        "exclude": exclude,
        "extend_exclude": extend_exclude,
        "per_file_ignores": per_file_ignores,
        "dtype": dtype,
        "device_type": device_type,
        "respect_gitignore": respect_gitignore,
    }
    return replace(
        settings,
        closest_configuration=config_file_named is None and not isolated,
        command_options=tuple(
            (name, value) for name, value in given.items() if value not in (None, ())
        ),
    )


def _config_and_overrides(values: tuple[str, ...]) -> tuple[Path | None, list[str]]:
    """`--config` values as ruff takes them: a configuration file (at most
    one), or TOML `KEY = VALUE` overrides."""
    files, overrides = [], []
    for value in values:
        (overrides if "=" in value and not _names_a_file(value) else files).append(value)
    if len(files) > 1:
        raise ConfigError(f"--config names two files ({files[0]}, {files[1]}); give one")
    return (Path(files[0]) if files else None), overrides


def _names_a_file(value: str) -> bool:
    """Whether `value` is the path of a file; a value no path can be (longer
    than the system allows, a NUL in it) is not, and is no error here."""
    try:
        return Path(value).is_file()
    except (OSError, ValueError):
        return False


class FileSettings:
    """Each file's settings: those of the configuration closest to it
    (`amplint.toml`, `.amplint.toml`, a `pyproject.toml` with `[tool.amplint]`),
    with the command line's options over it, as ruff resolves them; `check .`
    and `check legacy/x.py` then agree on legacy/x.py.  A run that named its
    configuration (`--config FILE`, `--isolated`) has one for every file."""

    def __init__(self, run: Settings) -> None:
        self.run = run
        # By directory as the paths name it, then resolved: a run asks for
        # every file, and resolving each path costs a stat per component.
        self._by_directory: dict[Path, Settings] = {}
        self._closest: dict[Path, Path | None] = {}  # resolved directory -> its configuration
        self._resolved_directories: dict[Path, Path] = {}
        self._by_configuration: dict[Path | None, Settings] = {run.config_file: run}

    def __call__(self, path: Path) -> Settings:
        """Raises ConfigError for a configuration that does not load."""
        if not self.run.closest_configuration:
            return self.run
        found = self._by_directory.get(path.parent)
        if found is None:
            # The directory the path names: a linked file takes its link's
            # configuration, as every file found beside it does.
            configuration = self._closest_configuration(self._resolved(path.parent))
            if configuration is None:  # nothing above it: the run's (defaults, the user's)
                found = self.run
            else:
                found = self._by_configuration.get(configuration)
                if found is None:
                    options = dict(self.run.command_options)
                    found = load_settings([configuration.parent], **options)
                    self._by_configuration[configuration] = found
            self._by_directory[path.parent] = found
        return found

    def _resolved(self, directory: Path) -> Path:
        """`directory` with its links followed, from its parent's resolution:
        one lstat a directory, where resolving each anew stats every component."""
        absolute = Path(os.path.abspath(directory))
        known = self._resolved_directories.get(absolute)
        if known is None:
            parent = absolute.parent
            if parent == absolute or os.path.islink(absolute):
                known = real_path(absolute)
            else:
                known = self._resolved(parent) / absolute.name
            self._resolved_directories[absolute] = known
        return known

    def _closest_configuration(self, directory: Path) -> Path | None:
        """find_config(directory), each directory on the way up looked at once
        for the whole run."""
        on_the_way: list[Path] = []
        found: Path | None = None
        for candidate in (directory, *directory.parents):
            if candidate in self._closest:
                found = self._closest[candidate]
                break
            on_the_way.append(candidate)
            found = config_in(candidate)
            if found is not None:
                break
        for candidate in on_the_way:
            self._closest[candidate] = found
        return found
