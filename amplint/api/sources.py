"""One source text checked and fixed as `check -` and `fix -` do."""

from __future__ import annotations

import os
from pathlib import Path

from amplint.api.records import (
    AnalysisError,
    FileResult,
    Finding,
    FixedFile,
    FixedSource,
    finding_of,
)
from amplint.config import Settings
from amplint.diagnostics import FileReport
from amplint.files import NOTEBOOK_SUFFIX, SourceError, SourceFile, source_from_bytes
from amplint.settings import StrPath, load_settings


def check_source(
    text: str, path: StrPath, settings: Settings | None = None
) -> list[Finding]:
    """The findings in `text`, the Python source of the file at `path` (which
    need not exist: its name decides per-file-ignores, its directory the
    project), each fixable one with the edits of its fix alone.  Where `path`
    ends in `.ipynb`, `text` is the notebook's JSON and the findings and edits
    name their cells."""
    checked = check_file(_source(text, path), settings)
    if checked.error is not None:
        raise AnalysisError(checked.error)
    return list(checked.findings)


def fix_source(
    text: str, path: StrPath, settings: Settings | None = None, *, unsafe: bool | None = None
) -> FixedSource:
    """`text` with the fixes `fix` would apply, the unsafe ones too where
    `unsafe` (None: where the configuration says `unsafe-fixes`): rewritten,
    self-checked and stable, or unchanged."""
    fixed = fix_file(_source(text, path), settings, unsafe=unsafe)
    if fixed.error is not None and not fixed.error.startswith("not fixed"):
        raise AnalysisError(fixed.error)
    new_text = fixed.fixed_text if fixed.fixed_text is not None else text
    return FixedSource(new_text, fixed.fixed, fixed.remaining)


def check_file(
    source: SourceFile, settings: Settings | None = None, *, edits: bool = True
) -> FileResult:
    """`check_source` for a source already read (the command line's standard
    input), with the edits of each fix where `edits`; `error` says why it was
    not checked."""
    report = _analysed(source, settings, fixing=False, previews=edits)
    findings = tuple(finding_of(d, source, report.previews.get(d)) for d in report.diagnostics)
    return FileResult(source.path, findings, report.error, source)


def fix_file(
    source: SourceFile, settings: Settings | None = None, *, unsafe: bool | None = None
) -> FixedFile:
    """`fix_source` for a source already read: what its fixes give, with the
    reason a fix was not made (its self-check failed) in `error`."""
    report = _analysed(source, settings, fixing=True, unsafe=unsafe)
    return FixedFile(
        source.path,
        tuple(finding_of(d, source, None) for d in report.applied),
        tuple(finding_of(d, source, None) for d in report.diagnostics),
        report.fixed_text,
        report.error,
        source,
    )


def _source(text: str, path: StrPath) -> SourceFile:
    path = Path(os.fspath(path))
    if path.suffix != NOTEBOOK_SUFFIX:  # already text: a coding cookie has had its say
        return SourceFile(path, text, "utf-8")
    try:  # the notebook's JSON: its cells are analysed
        return source_from_bytes(path, text.encode("utf-8", "surrogatepass"))
    except SourceError as error:
        raise AnalysisError(str(error)) from None


def _analysed(
    source: SourceFile,
    settings: Settings | None,
    *,
    fixing: bool,
    unsafe: bool | None = False,
    previews: bool = False,
) -> FileReport:
    from amplint.runner import Mode, run_source  # the runner forks; loaded when asked

    settings = settings if settings is not None else load_settings([source.path])
    return run_source(source, settings, Mode(fixing, unsafe, previews))
