"""What the AMP run of `amplint verify` runs: the rewrite `amplint fix` would
write of the script and of the project paths given with --rewrite, and, when
there is none, where the training step is instead."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from amplint import api
from amplint.config import Settings
from amplint.files import SourceError, read_source
from amplint.project import project_view
from amplint.verify import EXIT_ERROR, EXIT_NOTHING, VerifyError


@dataclass(frozen=True)
class Rewrite:
    """What the two runs run: the script as it is, and as amplint rewrites it
    together with the modules under --rewrite."""

    original: str
    script: str  # the script's rewrite; the original text when it changes nothing
    modules: dict[Path, str]  # real path -> rewritten text, for each module that changes
    applied: list[str]  # what the rewrite did, one line per fix ("path: " before a module's)
    codes: list[str]  # the rules whose fixes it carried out
    shown: dict[Path, str]  # real path -> the path as the user reads it
    covered: frozenset[Path]  # real paths of every file the rewrite looked at


def rewritten(
    script: Path, settings: Settings, unsafe: bool, rewrite_paths: Sequence[Path] = ()
) -> Rewrite:
    """The rewrite `amplint fix SCRIPT REWRITE_PATHS...` would write, or
    VerifyError 3 when it would change nothing."""
    try:
        source = read_source(script)
    except SourceError as error:
        raise VerifyError(EXIT_ERROR, f"{script}: {error}") from None
    if source.notebook is not None:
        raise VerifyError(EXIT_ERROR, f"{script}: verify runs scripts, not notebooks")
    reports = _fixed([script, *rewrite_paths], settings, unsafe)
    covered = frozenset(report.path.resolve() for report in reports)
    script_text, modules, applied, codes, shown = source.text, {}, [], set(), {}
    for report in reports:
        path = report.path.resolve()
        if report.fixed_text is None or report.source.notebook is not None:
            continue  # a notebook is never imported
        done = sorted({f"{d.code} {d.fix.message}" for d in report.fixed if d.fix is not None})
        codes |= {d.code for d in report.fixed}
        if path == script.resolve():
            script_text = report.fixed_text
            applied = done + applied
        else:
            modules[path] = report.fixed_text
            shown[path] = _shown(report.path)
            applied += [f"{shown[path]}: {change}" for change in done]
    if not applied:
        why = _nothing_to_rewrite(script, settings, unsafe, rewrite_paths, reports, covered)
        raise VerifyError(EXIT_NOTHING, why)
    return Rewrite(source.text, script_text, modules, applied, sorted(codes), shown, covered)


def _fixed(paths: Sequence[Path], settings: Settings, unsafe: bool) -> list[api.FixedFile]:
    """`fix`'s reports on `paths`, or VerifyError 2 naming a file it could not
    read or rewrite: a rewrite verified without it would not be the one fix writes."""
    reports = api.fix_paths(paths, settings, unsafe=unsafe, jobs=1, cache=False).files
    for report in reports:
        if report.error is not None:
            raise VerifyError(EXIT_ERROR, f"{_shown(report.path)}: {report.error}")
    return list(reports)


def _nothing_to_rewrite(
    script: Path,
    settings: Settings,
    unsafe: bool,
    rewrite_paths: Sequence[Path],
    reports: list[api.FixedFile],
    covered: frozenset[Path],
) -> str:
    """Why verify has nothing to compare, and where the training step may be
    instead: a driver script's step often lives in a module it imports."""
    declined = [(r, d) for r in reports for d in r.remaining if d.code == "AMP001"]
    if declined:  # a training step found, and judged unsafe to rewrite: the reason is the answer
        report, finding = declined[0]
        return (
            f"nothing to verify: amplint declines to rewrite the training step at "
            f"{_shown(report.path)}:{finding.range.start.line}: {finding.message}"
        )
    found = ", ".join(sorted({d.code for r in reports for d in r.remaining})) or "no findings"
    named = "".join(f" or {path}" for path in rewrite_paths)
    message = f"nothing to verify: amplint would not change {script}{named} ({found})"
    fixable, unfixed = unrewritten_imports(script, settings, unsafe, covered)
    if fixable:
        return (
            f"{message}; the training step is in what it imports: {listed(fixable)}; "
            "verify it as the script uses it with "
            + " ".join(f"--rewrite {path}" for path, _ in fixable)
        )
    if unfixed:
        return f"{message}; what it imports has findings amplint does not rewrite: " + listed(
            unfixed
        )
    return message + "; verify compares a script with its rewrite, so it needs a training step"


# A module as the user reads it, and the codes of its findings: ("engine.py", "AMP001").
Module = tuple[str, str]


def unrewritten_imports(
    script: Path, settings: Settings, unsafe: bool, covered: Iterable[Path]
) -> tuple[list[Module], list[Module]]:
    """The project modules the script imports, at any depth, outside `covered`
    (the files a rewrite looked at): those `fix` would change, and those with
    findings it would not fix."""
    covered = set(covered)
    candidates = [path for path in project_view(script).imported_program() if path not in covered]
    if not candidates:
        return [], []
    reports = api.fix_paths(
        [script, *candidates], settings, unsafe=unsafe, jobs=1, cache=False
    ).files
    fixable, unfixed = [], []
    for report in reports:
        if report.path.resolve() not in candidates:
            continue
        if report.fixed:
            codes = ", ".join(sorted({d.code for d in report.fixed}))
            fixable.append((_shown(report.path), codes))
        elif report.remaining:
            codes = ", ".join(sorted({d.code for d in report.remaining}))
            unfixed.append((_shown(report.path), codes))
    return fixable, unfixed


def listed(modules: list[Module]) -> str:
    """ "engine.py (AMP001), losses.py (AMP114)"."""
    return ", ".join(f"{path} ({codes})" for path, codes in modules)


def _shown(path: Path) -> str:
    """`path` as the user can pass it to --rewrite: relative to the working directory."""
    try:
        return os.path.relpath(path.resolve())
    except ValueError:  # another drive
        return str(path)
