"""amplint as a library: the settings the command line reads, the findings in
a source text or under paths, and their fixes.

    from pathlib import Path
    from amplint import api

    path = Path("src/train.py")
    settings = api.load_settings([path])  # its project's configuration, as `check` reads it
    for finding in api.check_source(path.read_text(), path, settings):
        print(finding.code, finding.range.start, finding.message)
        if finding.fix is not None:
            print(finding.fix.safe, finding.fix.edits)
    fixed = api.fix_source(path.read_text(), path, settings)
    for result in api.check_paths([Path("src")]).files:
        print(result.path, len(result.findings), result.error)

A source is analysed as `check -` and `fix -` analyse standard input: in a
worker process where the platform forks (a crash in libcst's native parser
costs that source, not the caller), under the file-time-limit, with the
project around `path` read from disk for the questions that cross modules.
Paths are checked and fixed as `check` and `fix` do, with the closest
configuration to each file.  Positions are 1-based lines and 1-based columns
counted in characters (code points), as the command line prints them.

The command line and `amplint server` are clients of this API: `check` and
`fix` run it and report its records (amplint/report formats them).
"""

from amplint.api.paths import check_paths, fix_paths
from amplint.api.records import (
    AnalysisError,
    FileResult,
    Finding,
    FixedFile,
    FixedSource,
    FixRun,
    Location,
    Range,
    Run,
    SuggestedFix,
    TextEdit,
    apply_edits,
    edits_between,
)
from amplint.api.sources import check_file, check_source, fix_file, fix_source
from amplint.config import ConfigError, Settings
from amplint.settings import FileSettings, load_settings

__all__ = [
    "AnalysisError",
    "ConfigError",
    "FileResult",
    "FileSettings",
    "Finding",
    "FixRun",
    "FixedFile",
    "FixedSource",
    "Location",
    "Range",
    "Run",
    "Settings",
    "SuggestedFix",
    "TextEdit",
    "apply_edits",
    "check_file",
    "check_paths",
    "check_source",
    "edits_between",
    "fix_file",
    "fix_paths",
    "fix_source",
    "load_settings",
]
