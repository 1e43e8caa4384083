"""Output for programs: a JSON list or one object a line, GitHub Actions and
Azure Pipelines workflow commands, pylint's parseable lines, JUnit XML for
test-report viewers, GitLab's Code Quality report, reviewdog's rdjson, and
SARIF 2.1.0 for code-scanning tools."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Iterable
from urllib.parse import quote

from amplint import __version__
from amplint.api.records import Location, Range
from amplint.catalog import RuleDoc, load_catalog
from amplint.diagnostics import LINE_BREAK
from amplint.report import Finding, location, printable
from amplint.report.text import rule_name

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def json_record(finding: Finding) -> dict:
    start, end, fix = finding.range.start, finding.range.end, finding.fix
    return {
        "code": finding.code,
        "name": rule_name(finding.code),
        "message": finding.message,
        "path": str(finding.path),
        "cell": finding.cell,  # a notebook's cell; the lines are then the cell's own
        "line": start.line,
        "column": start.column,
        "end_line": end.line,
        "end_column": end.column,
        "fix": (
            None
            if fix is None
            else {"applicability": "safe" if fix.safe else "unsafe", "message": fix.message}
        ),
    }


def json_document(findings: Iterable[Finding]) -> str:
    return json.dumps([json_record(finding) for finding in findings], indent=2)


def json_lines(findings: Iterable[Finding]) -> list[str]:
    """JSON Lines: each finding's JSON record (as `json` gives it) on a line."""
    return [json.dumps(json_record(finding)) for finding in findings]


def pylint_lines(findings: Iterable[Finding]) -> list[str]:
    """pylint's parseable format, `path:line: [CODE] message`, as ruff writes
    it.  A notebook's cells have no line in the file: its findings name line 1
    and say the cell and line in the message."""
    lines = []
    for finding in findings:
        start = finding.range.start
        message = finding.message
        line = start.line
        if finding.cell is not None:
            message, line = f"cell {finding.cell}, line {start.line}: {message}", 1
        path = printable(finding.path.as_posix())
        lines.append(f"{path}:{line}: [{finding.code}] {' '.join(message.split())}")
    return lines


def _azure_escaped(text: str) -> str:
    """Azure Pipelines' escaping of a logging command's data and properties."""
    for raw, escaped in (("%", "%AZP25"), (";", "%3B"), ("\r", "%0D"), ("\n", "%0A"), ("]", "%5D")):
        text = text.replace(raw, escaped)
    return text


def azure_lines(findings: Iterable[Finding]) -> list[str]:
    """Azure Pipelines `##vso[task.logissue]` logging commands, one a finding
    (as ruff writes them); a notebook's finding names the cell in its message."""
    lines = []
    for finding in findings:
        start = finding.range.start
        properties = {"type": "error", "sourcepath": finding.path.as_posix()}
        if finding.cell is None:
            properties.update(linenumber=start.line, columnnumber=start.column)
        properties["code"] = finding.code
        fields = "".join(
            f"{key}={_azure_escaped(str(value))};" for key, value in properties.items()
        )
        message = f"{location(finding)}: {finding.message}"
        lines.append(f"##vso[task.logissue {fields}]{_azure_escaped(message)}")
    return lines


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_lines(findings: Iterable[Finding]) -> list[str]:
    """GitHub Actions ``::error`` workflow commands: annotations on the diff.

    A notebook's cells have no line in the file GitHub shows, so its findings
    annotate the file and name the cell in the message.
    """
    lines = []
    for finding in findings:
        start, end = finding.range.start, finding.range.end
        properties = {"title": f"amplint ({finding.code})", "file": finding.path.as_posix()}
        if finding.cell is None:
            properties.update(
                line=start.line, col=start.column, endLine=end.line, endColumn=end.column
            )
        fields = ",".join(
            f"{key}={_escape_property(str(value))}" for key, value in properties.items()
        )
        message = f"{location(finding)}: {finding.code} {finding.message}"
        lines.append(f"::error {fields}::{_escape_data(message)}")
    return lines


def gitlab_document(findings: Iterable[Finding]) -> str:
    """GitLab's Code Quality report (a subset of Code Climate's issues), as
    ruff writes it: paths relative to the project GitLab checked out
    (`CI_PROJECT_DIR`, else the working directory), each finding's place, and
    a fingerprint that stays while the code moves (its path, code, message and
    how many alike came before it, not its line), which GitLab compares across
    pipelines to tell new findings from old."""
    base = Path(os.environ.get("CI_PROJECT_DIR") or os.getcwd()).resolve()
    seen: Counter[tuple[str, str, str]] = Counter()
    issues = []
    for finding in findings:
        start, end = finding.range.start, finding.range.end
        path = _relative_to(finding.path, base)
        alike = (path, finding.code, finding.message)
        fingerprint = hashlib.sha256("\0".join([*alike, str(seen[alike])]).encode()).hexdigest()
        seen[alike] += 1
        description = f"{finding.code}: {finding.message}"
        if finding.cell is not None:
            # A cell's lines are no lines of the .ipynb file GitLab shows: the
            # finding goes on its first line, its place in the description.
            description = f"cell {finding.cell}, line {start.line}: {description}"
            start = end = Location(1, 1)
        issues.append(
            {
                "check_name": finding.code,
                "description": description,
                "severity": "major",
                "fingerprint": fingerprint,
                "location": {
                    "path": path,
                    "positions": {
                        "begin": {"line": start.line, "column": start.column},
                        "end": {"line": end.line, "column": end.column},
                    },
                },
            }
        )
    return json.dumps(issues, indent=2)


def _relative_to(path: Path, base: Path) -> str:
    try:
        return path.resolve().relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def rdjson_document(findings: Iterable[Finding]) -> str:
    """reviewdog's Diagnostic Format as JSON (`DiagnosticResult`): each
    finding's message, code and range, whose columns count UTF-8 bytes from 1
    as reviewdog's format defines them.  A notebook's finding has no place in
    the file's lines: its message names the cell and line, and it has no range."""
    diagnostics = []
    for finding in findings:
        start = finding.range.start
        location: dict = {"path": str(finding.path)}
        message = finding.message
        if finding.cell is None:
            location["range"] = _rdjson_range(_source_lines(finding), finding.range)
        else:
            message = f"cell {finding.cell}, line {start.line}: {message}"
        diagnostic = {
            "message": message,
            "location": location,
            "severity": "ERROR",  # as every format says it (README, Output formats)
            "code": {"value": finding.code},
        }
        suggestions = _rdjson_suggestions(finding)
        if suggestions:
            diagnostic["suggestions"] = suggestions
        diagnostics.append(diagnostic)
    return json.dumps({"source": {"name": "amplint"}, "diagnostics": diagnostics}, indent=2)


def _rdjson_suggestions(finding: Finding) -> list[dict]:
    """A safe fix's edits as reviewdog suggestions (a range in UTF-8 columns
    and its new text), which reviewdog offers as a suggested change.  None
    for a notebook (its edits are in a cell's lines) or an unsafe fix."""
    fix = finding.found.fix
    if fix is None or not fix.safe or not fix.edits or finding.cell is not None:
        return []
    lines = _source_lines(finding)
    return [{"range": _rdjson_range(lines, edit.range), "text": edit.new_text} for edit in fix.edits]


def _rdjson_range(lines: list[str], found: Range) -> dict:
    """`found` as reviewdog's Range: lines from 1, columns in UTF-8 bytes from 1."""
    return {
        place: {"line": at.line, "column": _utf8_column(lines, at.line, at.column)}
        for place, at in (("start", found.start), ("end", found.end))
    }


def _source_lines(finding: Finding) -> list[str]:
    text = finding.source.text if finding.source is not None else ""
    return LINE_BREAK.split(text)


def _utf8_column(lines: list[str], line: int, column: int) -> int:
    """A column in characters (from 1) as UTF-8 bytes (from 1)."""
    if not 1 <= line <= len(lines):
        return column
    return len(lines[line - 1][: column - 1].encode("utf-8", "surrogatepass")) + 1


def junit_document(findings: Iterable[Finding], errors: Iterable[tuple[Path, str]] = ()) -> str:
    """JUnit XML as ruff writes it: a test suite a file, a failed test case a
    finding (named `amplint.CODE`, its class the file's path without suffix);
    a file that could not be analysed is a test case in error.  A run with
    neither is one passing case, so that a report viewer shows a run."""
    from xml.etree import ElementTree  # for this format only

    findings = sorted(findings, key=lambda finding: str(finding.path))  # stable: positions kept
    errors = [(path, _xml_text(message)) for path, message in errors]
    suites = ElementTree.Element(
        "testsuites",
        name="amplint",
        tests=str(len(findings) + len(errors) or 1),
        failures=str(len(findings)),
        errors=str(len(errors)),
    )
    for path, in_file in groupby(findings, key=lambda finding: _xml_text(str(finding.path))):
        in_file = list(in_file)
        suite = _junit_suite(suites, path, tests=len(in_file), failures=len(in_file))
        for finding in in_file:
            start = finding.range.start
            # A notebook's finding is on the file's first line (its cell's
            # lines are no lines of the .ipynb); the text names cell and line.
            in_file_at = start if finding.cell is None else Location(1, 1)
            case = ElementTree.SubElement(
                suite,
                "testcase",
                name=f"amplint.{finding.code}",
                classname=str(Path(path).with_suffix("")),
                line=str(in_file_at.line),
                column=str(in_file_at.column),
            )
            message = _xml_text(finding.message)
            failure = ElementTree.SubElement(case, "failure", message=message)
            where = f"cell {finding.cell}, " if finding.cell is not None else ""
            failure.text = f"{where}line {start.line}, col {start.column}, {message}"
    for path, message in errors:
        suite = _junit_suite(suites, _xml_text(str(path)), tests=1, errors=1)
        classname = _xml_text(str(Path(path).with_suffix("")))
        case = ElementTree.SubElement(suite, "testcase", name="amplint", classname=classname)
        ElementTree.SubElement(case, "error", message=message).text = message
    if not findings and not errors:
        suite = _junit_suite(suites, "amplint", tests=1)
        ElementTree.SubElement(suite, "testcase", name="amplint", classname="amplint")
    ElementTree.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(
        suites, encoding="unicode"
    )


# Characters XML 1.0 cannot hold at all (a file name may): written as escapes.
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def _junit_suite(
    suites: Element, name: str, tests: int, failures: int = 0, errors: int = 0
) -> Element:
    from xml.etree import ElementTree

    return ElementTree.SubElement(
        suites,
        "testsuite",
        name=name,
        tests=str(tests),
        disabled="0",
        errors=str(errors),
        failures=str(failures),
        package="amplint",
    )


def _section(body: str, title: str) -> str | None:
    match = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", body, re.M | re.S)
    return " ".join(match.group(1).split()) if match else None


def _sarif_rule(doc: RuleDoc) -> dict:
    body = doc.body
    return {
        "id": doc.code,
        "name": doc.name,
        "shortDescription": {"text": doc.summary},
        "fullDescription": {"text": _section(body, "What it finds") or doc.summary},
        "help": {"text": body, "markdown": body},
        "defaultConfiguration": {"level": "error"},
        "properties": {"fix": doc.fix, "min-torch": doc.min_torch},
    }


def _artifact_uri(path: Path) -> str:
    """A URI reference, as SARIF requires: percent-encoded (`a%20b.py`),
    absolute as a file URI, else relative."""
    return path.as_uri() if path.is_absolute() else quote(path.as_posix())


def _sarif_result(finding: Finding, rule_index: dict[str, int]) -> dict:
    start, end = finding.range.start, finding.range.end
    physical: dict = {"artifactLocation": {"uri": _artifact_uri(finding.path)}}
    if finding.cell is None:
        physical["region"] = {
            "startLine": start.line,
            "startColumn": start.column,
            "endLine": end.line,
            "endColumn": end.column,
        }
    message = finding.message
    if finding.cell is not None:
        message = f"cell {finding.cell}, line {start.line}: {message}"
    result: dict = {
        "ruleId": finding.code,
        "level": "error",
        "message": {"text": message},
        "locations": [{"physicalLocation": physical}],
    }
    if finding.code in rule_index:
        result["ruleIndex"] = rule_index[finding.code]
    if finding.cell is not None:
        result["properties"] = {"cell": finding.cell, "line": start.line, "column": start.column}
    return result


def sarif_document(findings: Iterable[Finding], errors: Iterable[tuple[Path, str]] = ()) -> str:
    """One SARIF 2.1.0 log: every rule of the catalogue (so a code-scanning UI
    can show its document), the findings, and files that could not be checked
    as tool notifications."""
    docs = list(load_catalog().values())
    rule_index = {doc.code: index for index, doc in enumerate(docs)}
    notifications = [
        {
            "level": "error",
            "message": {"text": message},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _artifact_uri(path)}}}],
        }
        for path, message in errors
    ]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "amplint",
                        "version": __version__,
                        "rules": [_sarif_rule(doc) for doc in docs],
                    }
                },
                "results": [_sarif_result(finding, rule_index) for finding in findings],
                "invocations": [
                    {
                        "executionSuccessful": not notifications,
                        "toolExecutionNotifications": notifications,
                    }
                ],
            }
        ],
    }
    return json.dumps(log, indent=2)
