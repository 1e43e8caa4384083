"""Every `--output-format`, `--statistics`, standard input, colour and the
progress bar.  Golden outputs live in tests/golden/formats; set
AMPLINT_UPDATE_GOLDEN=1 to rewrite them after a reviewed change."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import api, terminal
from amplint.catalog import load_catalog
from amplint.cli import main
from tests.helpers import FIXTURES, REPO, assert_matches_golden, dedent, run_cli
from tests.published import sarif_schema

GOLDEN = REPO / "tests" / "golden" / "formats"

FP32_AND_DEPRECATED = dedent("""
    import torch


    def train(model, loader, optimizer):
        scaler = torch.cuda.amp.GradScaler()
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
    """)
UNFIXABLE = "import torch\nctx = torch.cuda.amp.autocast(*flags)\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Relative paths, as users run it from their project root."""
    (tmp_path / "train.py").write_text(FP32_AND_DEPRECATED)
    (tmp_path / "ctx.py").write_text(UNFIXABLE)
    shutil.copy(FIXTURES / "notebooks" / "fp32_training.ipynb", tmp_path / "nb.ipynb")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("CI_PROJECT_DIR", raising=False)  # GitLab's: gitlab's paths from here
    return tmp_path


@pytest.mark.parametrize(
    "options, golden",
    [
        ((), "concise.txt"),
        (("--output-format", "text"), "concise.txt"),  # the name it had first
        (("--output-format", "full"), "full.txt"),
        (("--output-format", "github"), "github.txt"),
        (("--output-format", "json"), "json.json"),
        (("--output-format", "sarif"), "sarif.json"),
        (("--output-format", "json-lines"), "json-lines.jsonl"),
        (("--output-format", "pylint"), "pylint.txt"),
        (("--output-format", "azure"), "azure.txt"),
        (("--output-format", "junit"), "junit.xml"),
        (("--output-format", "gitlab"), "gitlab.json"),
        (("--output-format", "rdjson"), "rdjson.json"),
        (("--statistics",), "statistics.txt"),
        (("--statistics", "--output-format", "json"), "statistics.json"),
    ],
)
def test_golden(project: Path, options: tuple[str, ...], golden: str) -> None:
    result = run_cli("check", "--no-cache", *options, ".")
    assert result.exit_code == 1
    assert "\x1b[" not in result.stdout  # no colour off a terminal
    assert_matches_golden(result.stdout, GOLDEN / golden)


def test_full_shows_the_code_and_each_fix_alone(project: Path) -> None:
    out = run_cli("check", "--no-cache", "--output-format", "full", "train.py").stdout
    assert "  9 |         loss.backward()\n    |         ^^^^^^^^^^^^^^^\n" in out
    # each fix's own diff: AMP201's shows the migration and nothing of AMP001's rewrite
    migration = out[out.index("AMP201") : out.index("train.py:9:9")]
    assert '+    scaler = torch.amp.GradScaler("cuda")' in migration
    assert "autocast" not in migration


def test_github_annotations_escape_their_fields(tmp_path: Path) -> None:
    path = tmp_path / "a,b%.py"
    path.write_text(FP32_AND_DEPRECATED)
    line, _ = run_cli("check", "--no-cache", "--output-format", "github", path).stdout.splitlines()
    assert line.startswith("::error title=amplint (AMP201),file=")
    assert "a%2Cb%25.py,line=5,col=14,endLine=5,endColumn=39::" in line


def test_sarif_structure(project: Path) -> None:
    log = json.loads(run_cli("check", "--no-cache", "--output-format", "sarif", ".").stdout)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == list(load_catalog())
    amp001 = rules[[rule["id"] for rule in rules].index("AMP001")]
    assert amp001["name"] == "fp32-training-step"
    assert "## What it finds" in amp001["help"]["markdown"]
    results = run["results"]
    assert {result["ruleId"] for result in results} == {"AMP001", "AMP201"}
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        (location,) = result["locations"]
        uri = location["physicalLocation"]["artifactLocation"]["uri"]
        assert uri in ("train.py", "ctx.py", "nb.ipynb")
        if uri != "nb.ipynb":
            assert location["physicalLocation"]["region"]["startLine"] >= 1
        else:
            assert result["properties"]["cell"] == 7
    assert run["invocations"] == [{"executionSuccessful": True, "toolExecutionNotifications": []}]


def test_sarif_lists_files_that_could_not_be_checked(project: Path) -> None:
    (project / "bad.ipynb").write_text("{")
    result = run_cli("check", "--no-cache", "--output-format", "sarif", ".")
    assert result.exit_code == 2
    (invocation,) = json.loads(result.stdout)["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (notification,) = invocation["toolExecutionNotifications"]
    assert "invalid JSON" in notification["message"]["text"]


# -- colour -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "environment, coloured",
    [({}, False), ({"FORCE_COLOR": "1"}, True), ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False)],
)
def test_colour_only_when_asked_or_on_a_terminal(
    project: Path, monkeypatch: pytest.MonkeyPatch, environment: dict, coloured: bool
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    result = run_cli("check", "--no-cache", "train.py")
    assert ("\x1b[" in result.stdout) is coloured
    assert "\x1b[" not in run_cli("check", "--no-cache", "--output-format", "json", ".").stdout


# -- progress -----------------------------------------------------------------------
class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = _Terminal()
    monkeypatch.setattr(terminal.sys, "stderr", screen)
    bar = terminal.ProgressBar()
    for done in range(1, 11):
        bar(done, 10)
    bar.close()
    assert "Analysing" in screen.getvalue() and "100%" in screen.getvalue()

    quiet = io.StringIO()  # a pipe or a CI log
    monkeypatch.setattr(terminal.sys, "stderr", quiet)
    bar = terminal.ProgressBar()
    for done in range(1, 11):
        bar(done, 10)
    bar.close()
    assert quiet.getvalue() == ""


def test_a_short_run_shows_no_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = _Terminal()
    monkeypatch.setattr(terminal.sys, "stderr", screen)
    bar = terminal.ProgressBar()
    bar(1, 2)
    bar(2, 2)
    bar.close()
    assert screen.getvalue() == ""


# -- standard input -----------------------------------------------------------------
def _invoke(args: list[str], data: bytes):
    return CliRunner().invoke(main, args, input=data, catch_exceptions=False)


def test_check_stdin_names_the_stdin_filename(project: Path) -> None:
    result = _invoke(
        ["check", "-", "--stdin-filename", "src/train.py"], FP32_AND_DEPRECATED.encode()
    )
    assert result.exit_code == 1
    assert result.stdout.startswith("src/train.py:5:14: AMP201 [*]")


def test_check_stdin_without_a_name(project: Path) -> None:
    result = _invoke(["check", "-"], FP32_AND_DEPRECATED.encode())
    assert result.stdout.startswith("-:5:14: AMP201")


def test_stdin_follows_the_configuration_of_the_file_it_stands_for(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP201"]\n')
    result = _invoke(["check", "-", "--stdin-filename", "train.py"], FP32_AND_DEPRECATED.encode())
    assert "AMP201" not in result.stdout and "AMP001" in result.stdout


def test_fix_stdin_writes_the_fixed_source_and_reports_on_stderr(project: Path) -> None:
    source = FP32_AND_DEPRECATED + "ctx = torch.cuda.amp.autocast(*flags)\n"
    result = _invoke(["fix", "-", "--stdin-filename", "train.py"], source.encode())
    assert result.exit_code == 1  # the unfixable finding remains
    assert 'scaler = torch.amp.GradScaler("cuda")' in result.stdout
    assert "scaler.scale(loss).backward()" in result.stdout
    assert result.stderr.startswith("train.py:")
    assert "AMP201" in result.stderr


def test_fix_stdin_with_nothing_to_fix_echoes_the_source(project: Path) -> None:
    source = "x = 1\r\ny = 2\r\n"  # byte for byte, newlines included
    result = _invoke(["fix", "-", "--no-cache"], source.encode())
    assert result.exit_code == 0
    assert result.stdout_bytes == source.encode()


def test_fix_stdin_hands_back_what_it_cannot_read(project: Path) -> None:
    data = b"\xff\xfe not utf-8"
    result = _invoke(["fix", "-"], data)
    assert result.exit_code == 2
    assert result.stdout_bytes == data
    assert "cannot decode" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["check", "-", "train.py"], "cannot be mixed"),
        (["check", "train.py", "--stdin-filename", "x.py"], "pass `-`"),
    ],
)
def test_stdin_usage_errors(project: Path, args: list[str], message: str) -> None:
    result = _invoke(args, b"")
    assert result.exit_code == 2
    assert message in result.stderr


# -- the formats for other programs, read back as those programs read them -----
def _lines_and_records(output_format: str) -> tuple[list[str], list[dict]]:
    """The project's findings in `output_format`, a line each, and as `json` gives them."""
    out = run_cli("check", "--no-cache", "--output-format", output_format, ".").stdout
    records = json.loads(run_cli("check", "--no-cache", "--output-format", "json", ".").stdout)
    return out.splitlines(), records


def test_json_lines_are_the_json_records_one_a_line(project: Path) -> None:
    lines, records = _lines_and_records("json-lines")
    assert [json.loads(line) for line in lines] == records


# pylint's parseable format as the tools that read it parse it (reviewdog's
# and Jenkins' pattern for `pylint --output-format=parseable`).
PYLINT_LINE = re.compile(
    r"^(?P<path>[^:\n]+):(?P<line>\d+): \[(?P<code>[A-Z]+\d+)\] (?P<message>.+)$"
)


def test_pylint_lines_parse_as_pylint_s(project: Path) -> None:
    lines, records = _lines_and_records("pylint")
    parsed = [PYLINT_LINE.fullmatch(line) for line in lines]
    assert all(parsed) and len(parsed) == len(records)
    for match, record in zip(parsed, records):
        assert (match["path"], match["code"]) == (record["path"], record["code"])
        assert int(match["line"]) == (record["line"] if record["cell"] is None else 1)


# Azure Pipelines' logging command: `##vso[area.action key=value;...]message`,
# with `;`, `]`, `%` and line breaks escaped in both.
AZURE_COMMAND = re.compile(
    r"^##vso\[task\.logissue (?P<fields>(?:[a-z]+=[^;\]]*;)+)\](?P<message>[^\]]*)$"
)


def _azure_unescaped(text: str) -> str:
    for escaped, raw in (("%3B", ";"), ("%0D", "\r"), ("%0A", "\n"), ("%5D", "]"), ("%AZP25", "%")):
        text = text.replace(escaped, raw)
    return text


def test_azure_commands_parse_as_the_agent_reads_them(project: Path) -> None:
    lines, records = _lines_and_records("azure")
    commands = [AZURE_COMMAND.fullmatch(line) for line in lines]
    assert all(commands) and len(commands) == len(records)
    for command, record in zip(commands, records):
        fields = dict(f.split("=", 1) for f in command["fields"].rstrip(";").split(";"))
        assert fields["type"] == "error" and fields["code"] == record["code"]
        assert _azure_unescaped(fields["sourcepath"]) == record["path"]
        if record["cell"] is None:
            assert int(fields["linenumber"]) == record["line"]
        assert _azure_unescaped(command["message"]).endswith(record["message"])


def test_junit_reads_back_as_report_tools_read_it(project: Path) -> None:
    junitparser = pytest.importorskip("junitparser")
    out = run_cli("check", "--no-cache", "--output-format", "junit", ".", "missing.py")
    records = json.loads(run_cli("check", "--no-cache", "--output-format", "json", ".").stdout)
    report = junitparser.JUnitXml.fromstring(out.stdout.encode())
    cases = [(suite.name, case) for suite in report for case in suite]
    failed = [
        (name, case) for name, case in cases if isinstance(case.result[0], junitparser.Failure)
    ]
    assert [(name, case.name) for name, case in failed] == [
        (record["path"], f"amplint.{record['code']}") for record in records
    ]
    for (_, case), record in zip(failed, records):
        assert case.result[0].message == record["message"]
    [errored] = [case for _, case in cases if isinstance(case.result[0], junitparser.Error)]
    assert errored.classname == "missing" and "no such file" in errored.result[0].message
    assert (report.tests, report.failures, report.errors) == (len(records) + 1, len(records), 1)


def test_junit_of_a_clean_run_is_one_passing_case(tmp_path: Path) -> None:
    junitparser = pytest.importorskip("junitparser")
    (tmp_path / "ok.py").write_text("x = 1\n")
    out = run_cli("check", "--no-cache", "--output-format", "junit", tmp_path)
    assert out.exit_code == 0
    report = junitparser.JUnitXml.fromstring(out.stdout.encode())
    [[case]] = [list(suite) for suite in report]
    assert case.is_passed and (report.tests, report.failures) == (1, 0)


def test_junit_writes_a_control_character_in_a_file_name_as_an_escape(tmp_path: Path) -> None:
    junitparser = pytest.importorskip("junitparser")
    (tmp_path / "bad\x1bname.py").write_text(UNFIXABLE)
    out = run_cli("check", "--no-cache", "--output-format", "junit", tmp_path)
    report = junitparser.JUnitXml.fromstring(out.stdout.encode())
    assert [suite.name for suite in report] == [str(tmp_path / "bad\\x1bname.py")]


# GitLab's Code Quality report as GitLab documents it (docs.gitlab.com, "Code
# Quality report format"; it publishes no schema file): the required fields,
# a severity from its list, and a line as `lines.begin` or `positions.begin`.
GITLAB_CODE_QUALITY = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["description", "check_name", "fingerprint", "severity", "location"],
        "properties": {
            "description": {"type": "string", "minLength": 1},
            "check_name": {"type": "string", "minLength": 1},
            "fingerprint": {"type": "string", "minLength": 1},
            "severity": {"enum": ["info", "minor", "major", "critical", "blocker"]},
            "location": {
                "type": "object",
                "required": ["path"],
                "properties": {"path": {"type": "string", "minLength": 1}},
                "oneOf": [
                    {
                        "required": ["lines"],
                        "properties": {
                            "lines": {
                                "type": "object",
                                "required": ["begin"],
                                "properties": {"begin": {"type": "integer", "minimum": 1}},
                            }
                        },
                    },
                    {
                        "required": ["positions"],
                        "properties": {
                            "positions": {
                                "type": "object",
                                "required": ["begin"],
                                "properties": {
                                    "begin": {
                                        "type": "object",
                                        "required": ["line"],
                                        "properties": {"line": {"type": "integer", "minimum": 1}},
                                    }
                                },
                            }
                        },
                    },
                ],
            },
        },
    },
}


def test_gitlab_report_has_the_fields_gitlab_reads(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    monkeypatch.setenv("CI_PROJECT_DIR", str(project))
    monkeypatch.chdir(project / "..")  # paths are relative to the project, not here
    issues = json.loads(run_cli("check", "--no-cache", "--output-format", "gitlab", project).stdout)
    jsonschema.validate(issues, GITLAB_CODE_QUALITY)
    records = json.loads(run_cli("check", "--no-cache", "--output-format", "json", project).stdout)
    assert [(i["location"]["path"], i["check_name"]) for i in issues] == [
        (Path(r["path"]).relative_to(project).as_posix(), r["code"]) for r in records
    ]
    assert len({issue["fingerprint"] for issue in issues}) == len(issues)


def test_a_gitlab_fingerprint_follows_its_finding_when_the_code_moves(tmp_path: Path) -> None:
    twice = UNFIXABLE + "again = torch.cuda.amp.autocast(*flags)\n"
    (tmp_path / "ctx.py").write_text(twice)

    def fingerprints() -> list[str]:
        out = run_cli("check", "--no-cache", "--output-format", "gitlab", tmp_path).stdout
        return [issue["fingerprint"] for issue in json.loads(out)]

    before = fingerprints()
    (tmp_path / "ctx.py").write_text("# a comment above\n\n" + twice)
    assert fingerprints() == before and len(set(before)) == 2


# reviewdog's DiagnosticResult, as its format's definition gives the fields
# (github.com/reviewdog/reviewdog, proto/rdf/reviewdog.proto): positions count
# lines and UTF-8 bytes from 1, the severity is one of its enum's names.  Stricter
# than reviewdog's generated proto/rdf/jsonschema/DiagnosticResult.json (which
# allows any other field, and is on no package registry the tests can install
# from); the rdjson of a project like this test's, a notebook with it, validated
# against that file at reviewdog 6c307503194f0f32bf1956c7fcd2877636338db6 too.
_RDF_POSITION = {
    "type": "object",
    "properties": {
        "line": {"type": "integer", "minimum": 1},
        "column": {"type": "integer", "minimum": 1},
    },
    "additionalProperties": False,
}
RDJSON = {
    "type": "object",
    "required": ["diagnostics"],
    "additionalProperties": False,
    "properties": {
        "source": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "url": {"type": "string"}},
        },
        "severity": {"enum": ["UNKNOWN_SEVERITY", "ERROR", "WARNING", "INFO"]},
        "diagnostics": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["message", "location"],
                "additionalProperties": False,
                "properties": {
                    "message": {"type": "string", "minLength": 1},
                    "location": {
                        "type": "object",
                        "required": ["path"],
                        "additionalProperties": False,
                        "properties": {
                            "path": {"type": "string", "minLength": 1},
                            "range": {
                                "type": "object",
                                "required": ["start"],
                                "additionalProperties": False,
                                "properties": {"start": _RDF_POSITION, "end": _RDF_POSITION},
                            },
                        },
                    },
                    "severity": {"enum": ["UNKNOWN_SEVERITY", "ERROR", "WARNING", "INFO"]},
                    "code": {
                        "type": "object",
                        "required": ["value"],
                        "properties": {"value": {"type": "string"}, "url": {"type": "string"}},
                    },
                    # reviewdog's Suggestion: a range of the file and its new text.
                    "suggestions": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["range", "text"],
                            "additionalProperties": False,
                            "properties": {
                                "range": {
                                    "type": "object",
                                    "required": ["start", "end"],
                                    "additionalProperties": False,
                                    "properties": {"start": _RDF_POSITION, "end": _RDF_POSITION},
                                },
                                "text": {"type": "string"},
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_rdjson_has_reviewdog_s_fields_and_counts_columns_in_utf8_bytes(
    project: Path,
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    (project / "wide.py").write_text(
        'import torch\nlabel = "\u00e9\U0001f680"; scaler = torch.cuda.amp.GradScaler()\n'
    )
    result = json.loads(run_cli("check", "--no-cache", "--output-format", "rdjson", ".").stdout)
    jsonschema.validate(result, RDJSON)
    records = json.loads(run_cli("check", "--no-cache", "--output-format", "json", ".").stdout)
    diagnostics = result["diagnostics"]
    assert [(d["location"]["path"], d["code"]["value"]) for d in diagnostics] == [
        (r["path"], r["code"]) for r in records
    ]
    [wide] = [d for d in diagnostics if d["location"]["path"] == "wide.py"]
    # `label = "é🚀"; scaler = `: 23 characters, 27 bytes (é two, 🚀 four).
    assert wide["location"]["range"]["start"] == {"line": 2, "column": 28}
    # The safe fix as reviewdog's suggestion, in the same UTF-8 columns.
    [suggestion] = wide["suggestions"]
    assert suggestion["range"]["start"] == {"line": 2, "column": 34}
    assert suggestion["text"] == 'amp.GradScaler("cuda"'
    [notebook] = [d for d in diagnostics if d["location"]["path"] == "nb.ipynb"]
    assert "range" not in notebook["location"] and notebook["message"].startswith("cell 7, ")


def test_sarif_is_valid_against_the_published_sarif_2_1_0_schema(project: Path) -> None:
    """The log, with a notebook's finding and a file that could not be
    checked, against SARIF 2.1.0's JSON schema as published (tests/published.py)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = sarif_schema()
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())
    (project / "broken.py").write_bytes(b"\xff\xfe not utf-8 autocast")
    log = json.loads(run_cli("check", "--no-cache", "--output-format", "sarif", ".").stdout)
    results = log["runs"][0]["results"]
    assert any("region" in r["locations"][0]["physicalLocation"] for r in results)
    assert any("cell" in r.get("properties", {}) for r in results)
    assert log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    validator.validate(log)
    # The schema holds what it says: a region's lines count from 1.
    results[0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    assert not validator.is_valid(log)


def test_sarif_reads_back_with_a_sarif_2_1_0_object_model(project: Path) -> None:
    """sarif-pydantic (SARIF 2.1.0's objects as pydantic models) parses the log
    and types every object it knows; the json records say what it must hold."""
    sarif = pytest.importorskip("sarif_pydantic")
    (project / "broken.py").write_bytes(b"\xff\xfe not utf-8 autocast")
    out = run_cli("check", "--no-cache", "--output-format", "sarif", ".").stdout
    log = sarif.Sarif.model_validate(json.loads(out))
    records = json.loads(run_cli("check", "--no-cache", "--output-format", "json", ".").stdout)
    [run] = log.runs
    assert log.version == "2.1.0" and run.tool.driver.name == "amplint"
    rules = [rule.id for rule in run.tool.driver.rules]
    assert sorted(rules) == sorted(load_catalog())
    assert [(r.rule_id, r.rule_index) for r in run.results] == [
        (record["code"], rules.index(record["code"])) for record in records
    ]
    for result, record in zip(run.results, records):
        [where] = result.locations
        assert where.physical_location.artifact_location.uri.endswith(Path(record["path"]).name)
        if record["cell"] is None:
            region = where.physical_location.region
            assert (region.start_line, region.start_column) == (record["line"], record["column"])
    # Files that could not be checked: notifications of the invocation (a
    # part of SARIF this model keeps untyped).
    [invocation] = run.invocations
    assert "broken.py" in json.dumps(invocation.model_dump(mode="json", by_alias=True))


def test_full_shows_control_characters_without_sending_them(tmp_path: Path) -> None:
    """An escape sequence in a string would drive the terminal, a right-to-left
    override reorder the line: `full` shows their pictures and escapes, a tab
    as four spaces, and the carets still under the finding."""
    path = tmp_path / "train.py"
    path.write_text(
        'import torch\nlabel = "\x1b[31mred\tx\u202e"; scaler = torch.cuda.amp.GradScaler()\n',
        encoding="utf-8",
    )
    shown = run_cli("check", "--no-cache", "--output-format", "full", path).stdout
    assert "\x1b" not in shown and "\u202e" not in shown and "\t" not in shown
    [code] = [line for line in shown.splitlines() if line.startswith("  2 | ")]
    assert code == '  2 | label = "\u241b[31mred    x\\u202e"; scaler = torch.cuda.amp.GradScaler()'
    carets = shown.splitlines()[shown.splitlines().index(code) + 1]
    assert carets.index("^") == code.index("torch.cuda") and carets.count("^") == 25
    assert '+label = "\u241b[31mred    x\\u202e"; scaler = torch.amp.GradScaler("cuda")' in shown


def test_sarif_uris_are_percent_encoded() -> None:
    # A URI reference may not hold a space or a `#`: `a b.py` was written raw.
    from amplint.report.machine import _artifact_uri

    assert _artifact_uri(Path("src/a b#1.py")) == "src/a%20b%231.py"
    assert _artifact_uri(Path("/tmp/a b.py")) == "file:///tmp/a%20b.py"


def test_one_finding_has_one_severity_in_every_format(project: Path) -> None:
    # Error in github and sarif, warning in rdjson and the editor: now error
    # wherever a format has severities, as the README states.
    def output(form: str) -> str:
        return run_cli("check", "--no-cache", "--output-format", form, "train.py").stdout

    assert output("github").startswith("::error ")
    assert "type=error;" in output("azure")
    assert {r["level"] for r in json.loads(output("sarif"))["runs"][0]["results"]} == {"error"}
    assert {d["severity"] for d in json.loads(output("rdjson"))["diagnostics"]} == {"ERROR"}
    assert {i["severity"] for i in json.loads(output("gitlab"))} == {"major"}
    pytest.importorskip("pygls")
    from lsprotocol import types
    from pygls.workspace import TextDocument

    from amplint.server import _diagnostic

    text = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
    [finding] = api.check_source(text, "t.py")
    document = TextDocument("file:///t.py", source=text)
    assert _diagnostic(document, finding).severity == types.DiagnosticSeverity.Error
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert "Every finding has one severity, error" in readme
