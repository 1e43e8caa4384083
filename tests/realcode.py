"""Run check and fix over a whole tree of real Python, on a scratch copy, and
prove the guarantees held.

    python -m tests.realcode [--tree PATH]        (or: make realcode)

The default tree is the installed torch package.  Fails (exit 1) on any
internal error, any file the fix left unparsable, and any change a second fix
makes.  Clean per-file errors (not analysed, not fixed, undecodable) are
counted, not failures.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from amplint.config import Settings
from amplint.files import read_source
from amplint.writes import write_source_atomic
from amplint.runner import default_jobs, run

from tests.bench import installed_torch


@dataclass
class Outcome:
    files: int = 0
    findings: int = 0
    fixed_files: int = 0
    clean_errors: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


def _error_kind(error: str) -> str:
    return error.split(":")[0]


def verify_tree(tree: Path, jobs: int | None = None) -> Outcome:
    """Check, fix, re-parse and fix again `tree` (which this changes)."""
    settings = Settings(root=tree)
    jobs = jobs or default_jobs()
    outcome = Outcome()
    for report in run([tree], settings, jobs=jobs):
        outcome.files += 1
        outcome.findings += len(report.diagnostics)
        if report.error is not None:
            if report.error.startswith("internal error"):
                outcome.failures.append(f"check: {report.path}: {report.error}")
            else:
                outcome.clean_errors[_error_kind(report.error)] += 1
    for report in run([tree], settings, fixing=True, jobs=jobs):
        if report.error is not None and report.error.startswith("internal error"):
            outcome.failures.append(f"fix: {report.path}: {report.error}")
        if report.fixed_text is None:
            continue
        try:
            ast.parse(report.fixed_text)
        except SyntaxError as error:
            outcome.failures.append(f"fix: {report.path}: does not parse: {error}")
            continue
        write_source_atomic(report.source, report.fixed_text)
        written = read_source(report.path).text
        if written != report.fixed_text:
            outcome.failures.append(f"fix: {report.path}: written text differs")
        outcome.fixed_files += 1
    for report in run([tree], settings, fixing=True, jobs=jobs):
        if report.fixed_text is not None:
            outcome.failures.append(f"second fix: {report.path}: changed it again")
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, help="default: the installed torch package")
    options = parser.parse_args()
    tree = (options.tree or installed_torch()).resolve()
    scratch = Path(tempfile.mkdtemp(prefix="amplint-realcode-"))
    try:
        copy = scratch / tree.name
        shutil.copytree(tree, copy, symlinks=True)
        outcome = verify_tree(copy)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"tree: {tree}")
    print(f"files checked and fixed: {outcome.files:,}; findings: {outcome.findings:,}")
    print(f"files fixed: {outcome.fixed_files:,}; each parses; a second fix changed none")
    errors = ", ".join(f"{kind}: {count}" for kind, count in sorted(outcome.clean_errors.items()))
    print(f"clean per-file errors: {errors or 'none'}")
    print(f"failures: {len(outcome.failures)}")
    for failure in outcome.failures:
        print(f"  {failure}")
    sys.exit(1 if outcome.failures else 0)


if __name__ == "__main__":
    main()
