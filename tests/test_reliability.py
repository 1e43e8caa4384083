"""Hostile input and interruption: amplint never crashes, never corrupts a file,
never runs the code it reads and never writes outside the paths it is given.

Each bad input sits beside a good file with a known finding: the run must give
the bad file findings or a one-line error, and still check and fix the good one.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import runner
from amplint.cli import main
from amplint.config import Settings
from tests.helpers import REPO, dead_pid, run_cli

GOOD = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
GOOD_FIXED = 'import torch\n\nscaler = torch.amp.GradScaler("cuda")\n'
STEP = (
    "for x, y in loader:\n    loss = crit(model(x), y)\n    loss.backward()\n    optimizer.step()\n"
)

# name -> (bytes of the bad file, what the run must say about it)
#   "error: <text>"   a one-line error naming the file, the file left as it was
#   "AMP900"          reported as not parsing, left as it was
#   "fixed"           fixed like any file, bytes outside the fix kept
#   "clean"           nothing to report, left as it was
#   "unfixed: <text>" reported; fix refuses it with a one-line error, leaves it as it was
BAD_INPUTS = {
    # Broken files that a rule would read: libcst says why it cannot.
    "syntax error": (GOOD.encode() + b"def f(:\n", "AMP900"),
    "python 2": (GOOD.encode() + b'print "loss", loss\n', "AMP900"),
    "empty": (b"", "clean"),
    "only a BOM": (b"\xef\xbb\xbf", "clean"),
    "binary named .py": (b"\x7fELF\x02\x01\x00\x00torch.cuda.amp\x00\xff", "error: binary file"),
    "undecodable bytes": (b"x = '\xff\xfe'  # torch.cuda.amp\n", "error: cannot decode"),
    "latin-1 with a coding cookie": (
        b"# -*- coding: latin-1 -*-\n" + GOOD.encode() + b"name = 'caf\xe9'\n",
        "fixed",
    ),
    "BOM": (b"\xef\xbb\xbf" + GOOD.encode(), "fixed"),
    "CRLF": (GOOD.replace("\n", "\r\n").encode(), "fixed"),
    # libcst cannot write lone CR line ends back as they were.
    "lone CR": (GOOD.replace("\n", "\r").encode(), "unfixed: cannot reproduce this file"),
    "tabs": (GOOD.encode() + b"if True:\n\tscaler2 = torch.cuda.amp.GradScaler()\n", "fixed"),
    "form feed between statements": (GOOD.replace("\n\n", "\n\f\n").encode(), "fixed"),
    # A form feed opening the file is another line end libcst does not keep.
    "form feed first": (b"\f" + GOOD.encode(), "unfixed: cannot reproduce this file"),
    "a 2 MB line": (GOOD.encode() + b"blob = '" + b"a" * 2_000_000 + b"'\n", "error: MB is more"),
    "a 1 MB line": (GOOD.encode() + b"blob = '" + b"a" * 1_000_000 + b"'\n", "fixed"),
    "a 10 MB file": (
        GOOD.encode() + b"".join(b"v%d = %d\n" % (i, i) for i in range(1_000_000)),
        "error: MB is more than amplint parses",
    ),
    "2,000 nested parentheses": (
        ("import torch\nloss = " + "(" * 2000 + "1" + ")" * 2000 + "\n" + STEP).encode(),
        "AMP900",
    ),
    "a sum of 100,000 terms": (
        ("import torch\nloss = " + "+".join(["1"] * 100_000) + "\n" + STEP).encode(),
        "AMP900",
    ),
    "a sum of 1,000 terms": (
        ("import torch\nloss = " + "+".join(["1"] * 1000) + "\n" + STEP).encode(),
        "error: nested too deeply",
    ),
    "unknown codec": (b"# coding: klingon\nimport torch.cuda.amp\n", "error: cannot decode"),
    # Codecs that are no text encodings: LookupError escaped decode_source.
    "hex codec": (b"# coding: hex\nimport torch.cuda.amp\n", "error: not a text encoding"),
    "rot13 codec": (b"# coding: rot13\nimport torch.cuda.amp\n", "error: not a text encoding"),
    "base64 codec": (b"# coding: base64\nimport torch.cuda.amp\n", "error: not a text encoding"),
    # A cookie Python cannot have read: was decoded into nothing and "passed".
    "utf-16 cookie on ASCII": (
        b"# coding: utf-16\n" + GOOD.encode(),
        "error: does not spell ASCII",
    ),
    # utf-7 spells `a` as `+AGE-` too: writing the text back would change it.
    "utf-7 that does not round-trip": (
        b"# coding: utf-7\nimport torch  # +AGE-\nscaler = torch.cuda.amp.GradScaler()\n",
        "unfixed: bytes do not come back the same",
    ),
    # RecursionError in the analysis, then again formatting its message.
    "a 600-branch elif chain around a training step": (
        (
            "import torch\nif mode == 0:\n"
            + "".join("    " + line + "\n" for line in STEP.splitlines())
            + "".join(f"elif mode == {i}:\n    pass\n" for i in range(1, 600))
            + GOOD
        ).encode(),
        "error: nested too deeply",
    ),
    # libcst's parser overflows its native stack: the process that parses dies.
    "an or of 8,000 terms": (
        (GOOD + "y = " + " or ".join(f"a{i}" for i in range(8000)) + "\n").encode(),
        "error: died (SIGSEGV)",
    ),
    "null byte in text": (b"import torch.cuda.amp\nx = 1\x00\n", "error: binary file"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_gets_a_finding_or_an_error_and_the_run_goes_on(
    tmp_path: Path, name: str
) -> None:
    content, expected = BAD_INPUTS[name]
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_bytes(content)
    good.write_text(GOOD)

    check = run_cli("check", "--no-cache", tmp_path)
    assert check.exit_code in (1, 2)
    assert f"{good}:3:10: AMP201" in check.stdout
    fix = run_cli("fix", "--apply", "--no-cache", tmp_path)
    assert good.read_text() == GOOD_FIXED
    after = bad.read_bytes()

    if expected.startswith("error: "):
        errors = [line for line in check.stderr.splitlines() if str(bad) in line]
        assert len(errors) == 1 and expected[len("error: ") :] in errors[0], check.stderr
        assert check.exit_code == fix.exit_code == 2
        assert after == content
    elif expected == "AMP900":
        assert f"{bad}:" in check.stdout and "AMP900" in check.stdout
        assert after == content
    elif expected.startswith("unfixed: "):
        assert check.exit_code == 1 and f"{bad}:3:10: AMP201" in check.stdout
        errors = [line for line in fix.stderr.splitlines() if "error" in line]
        assert len(errors) == 1 and str(bad) in errors[0]
        assert expected[len("unfixed: ") :] in errors[0]
        assert fix.exit_code == 2 and after == content
    elif expected == "clean":
        assert str(bad) not in check.stdout + check.stderr
        assert after == content
    else:
        assert expected == "fixed"
        assert str(bad) in check.stdout and "AMP201" in check.stdout
        _assert_fixed_in_place(content, after)
        assert run_cli("fix", "--apply", "--no-cache", tmp_path).exit_code == 0  # settled


def _assert_fixed_in_place(before: bytes, after: bytes) -> None:
    """Only the deprecated call changed: encoding, BOM and newlines kept."""
    old, new = b"torch.cuda.amp.GradScaler()", b'torch.amp.GradScaler("cuda")'
    assert after == before.replace(old, new)
    text = after.decode("latin-1" if b"latin-1" in after else "utf-8-sig")
    ast.parse(text)


def test_a_file_deleted_after_discovery_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gone.py").write_text(GOOD)
    (tmp_path / "good.py").write_text(GOOD)
    read_source = runner.read_source

    def deleted_first(path: Path):
        if path.name == "gone.py":
            path.unlink()
        return read_source(path)

    monkeypatch.setattr(runner, "read_source", deleted_first)
    gone, good = runner.run([tmp_path], Settings(root=tmp_path))
    assert gone.error == "no such file"
    assert [d.code for d in good.diagnostics] == ["AMP201"]


def test_a_file_edited_while_fix_runs_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "train.py"
    target.write_text(GOOD)
    analyse = runner.analyse_source

    def user_saves_meanwhile(source, *args, **kwargs):
        report = analyse(source, *args, **kwargs)
        target.write_text(GOOD + "# the user's new line\n")
        return report

    monkeypatch.setattr(runner, "analyse_source", user_saves_meanwhile)
    result = run_cli("fix", "--apply", "--no-cache", target)
    assert result.exit_code == 2
    assert "changed since amplint read it; not written" in result.stderr
    assert target.read_text() == GOOD + "# the user's new line\n"


def test_a_read_only_file_is_an_error_and_untouched(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_text(GOOD)
    target.chmod(0o444)
    result = run_cli("fix", "--apply", "--no-cache", tmp_path)
    assert result.exit_code == 2
    assert f"{target}: cannot write: file is not writable (read-only)" in result.stderr
    assert target.read_text() == GOOD


def _link(link: Path, target: Path) -> None:
    try:
        os.symlink(target, link)
    except OSError:
        pytest.skip("this system cannot create symbolic links")


def test_links_are_written_through_only_inside_the_named_paths(tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (tree / "train.py").write_text(GOOD)
    (outside / "shared.py").write_text(GOOD)
    _link(tree / "alias.py", tree / "train.py")  # sorts first: seen before its target
    _link(tree / "escape.py", outside / "shared.py")
    result = run_cli("fix", "--apply", "--no-cache", tree)
    assert result.exit_code == 2
    assert "escape.py: cannot write: a link to" in result.stderr
    assert (outside / "shared.py").read_text() == GOOD
    assert (tree / "escape.py").is_symlink() and (tree / "alias.py").is_symlink()
    assert (tree / "train.py").read_text() == GOOD_FIXED


def test_link_loops_are_skipped(tmp_path: Path) -> None:
    _link(tmp_path / "a.py", tmp_path / "b.py")
    _link(tmp_path / "b.py", tmp_path / "a.py")
    _link(tmp_path / "loop", tmp_path)
    (tmp_path / "good.py").write_text(GOOD)
    result = run_cli("check", "--no-cache", tmp_path)
    assert result.exit_code == 1
    assert result.stdout.count("AMP201") == 1


# -- never execute ----------------------------------------------------------------
def test_check_and_fix_never_import_or_run_the_code_they_read(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    payload = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    tree = tmp_path / "project"
    tree.mkdir()
    # Each file has a finding, so it is compiled, parsed and fixed.
    for name in ("train.py", "conftest.py", "setup.py", "__init__.py", "sitecustomize.py"):
        (tree / name).write_text(payload + GOOD)
    # What `python -m amplint` would import from the working directory.
    for module in ("click", "libcst", "pathspec", "black", "torch"):
        (tree / f"{module}.py").write_text(payload)
    for command in (["check"], ["fix"], ["fix", "--apply"]):
        subprocess.run(
            [sys.executable, "-m", "amplint", *command, "--no-cache", "."],
            cwd=tree,
            capture_output=True,
            check=False,
        )
    assert not marker.exists(), marker.read_text()
    assert (tree / "train.py").read_text() == payload + GOOD_FIXED


# -- interruption -----------------------------------------------------------------
@pytest.mark.slow
def test_a_killed_fix_leaves_every_file_original_or_fully_fixed(tmp_path: Path) -> None:
    """SIGKILL `fix --apply` while it writes: each file is the old or the new one.

    Analysis comes first and the writes last, so the kill time is searched
    (bisected between start and a full run's duration) until kills land
    while writing (rewrites beside their files, or some renamed): the test
    insists on seeing them, and the next run that writes cleans up.
    """
    fixed = GOOD_FIXED
    command = [sys.executable, "-m", "amplint", "fix", "--apply", "--no-cache"]

    def tree_for(name: str) -> Path:
        tree = tmp_path / name
        tree.mkdir()
        for index in range(300):
            (tree / f"m{index:03}.py").write_text(GOOD)
        return tree

    start = time.perf_counter()
    subprocess.run([*command, str(tree_for("full"))], cwd=REPO, capture_output=True)
    early, late = 0.0, time.perf_counter() - start
    interrupted_writes = 0
    for attempt in range(60):  # the bisection is noisy on a loaded machine
        tree = tree_for(f"killed{attempt}")
        process = subprocess.Popen(
            [*command, str(tree)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        delay = (early + late) / 2
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        contents = [path.read_text() for path in sorted(tree.glob("*.py"))]
        assert len(contents) == 300
        assert all(text in (GOOD, fixed) for text in contents)
        done = contents.count(fixed)
        # Killed while writing: rewrites written beside their files, or some
        # of them renamed (a journal says which are left).
        leftovers = [p for p in tree.iterdir() if p.name.startswith(".")]
        if done == 0 and not leftovers:
            early = delay
        elif done == len(contents) and not leftovers:
            late = delay
        else:
            interrupted_writes += 1
            if interrupted_writes == 3:
                break
    assert interrupted_writes, "no kill landed while files were being written"
    # What a kill left (temporaries, a journal) goes with the next run that writes.
    for tree in tmp_path.glob("killed*"):
        assert run_cli("fix", "--apply", "--no-cache", tree).exit_code == 0
        assert [p for p in tree.iterdir() if p.name.startswith(".")] == []
        assert all(path.read_text() == fixed for path in tree.glob("*.py"))


# -- real code --------------------------------------------------------------------
@pytest.mark.slow
def test_real_code_survives_check_and_fix(tmp_path: Path) -> None:
    """A slice of the installed torch package, where the AMP code lives; the
    whole package is `make realcode`."""
    from tests.bench import installed_torch
    from tests.realcode import verify_tree

    torch_tree = installed_torch()
    for part in ("amp", "cuda/amp", "cpu/amp", "optim", "nn/utils", "distributed/optim"):
        shutil.copytree(torch_tree / part, tmp_path / part)
    # Training loops in torch's own tests: real fixes to make.
    shutil.copy(torch_tree / "testing/_internal/common_quantization.py", tmp_path)
    outcome = verify_tree(tmp_path, jobs=1)
    assert outcome.failures == []
    assert outcome.files > 50 and outcome.findings >= 2 and outcome.fixed_files >= 1


def test_errors_alone_do_not_read_as_all_checks_passed(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_bytes(b"\x7fELF\x00torch.cuda.amp")
    result = run_cli("check", "--no-cache", tmp_path)
    assert result.exit_code == 2
    assert "All checks passed" not in result.stdout
    assert "No findings; 1 file could not be checked (errors above)." in result.stdout


def test_a_broken_notebook_is_a_one_line_error_and_breaks_nothing(tmp_path: Path) -> None:
    (tmp_path / "broken.ipynb").write_text('{"cells": [ torch.cuda.amp')
    (tmp_path / "good.py").write_text(GOOD)
    result = run_cli("fix", "--apply", "--no-cache", tmp_path)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "broken.ipynb: not a notebook: invalid JSON at line 1 column 13" in result.stderr
    assert (tmp_path / "good.py").read_text() == GOOD_FIXED
    assert (tmp_path / "broken.ipynb").read_text() == '{"cells": [ torch.cuda.amp'


# -- time: no input is quadratic or worse ------------------------------------------
def _timed_cli(*args) -> tuple[float, object]:
    start = time.perf_counter()
    result = run_cli(*args)
    return time.perf_counter() - start, result


def test_a_pyproject_of_blank_lines_is_read_in_linear_time(tmp_path: Path) -> None:
    """200,000 blank lines took 38 s when the [tool.amplint] search spanned lines."""
    (tmp_path / "pyproject.toml").write_text("\n" * 200_000 + "[tool.amplint]\nselect = ['AMP2']\n")
    (tmp_path / "good.py").write_text(GOOD)
    elapsed, result = _timed_cli("check", "--no-cache", tmp_path)
    assert result.exit_code == 1 and "AMP201" in result.stdout
    assert elapsed < 1.0


def test_an_exclude_of_many_stars_is_matched_in_linear_time(tmp_path: Path) -> None:
    """pathspec's regex for this pattern backtracked for minutes on a long name."""
    (tmp_path / "pyproject.toml").write_text(
        "[tool.amplint]\nextend-exclude = ['*a*a*a*a*a*a*a*a*ab']\n"
    )
    deep = tmp_path / ("a" * 200) / ("a" * 200)
    deep.mkdir(parents=True)
    (deep / ("a" * 200 + ".py")).write_text(GOOD)
    elapsed, result = _timed_cli("check", "--no-cache", tmp_path)
    assert result.exit_code == 1 and result.stdout.count("AMP201") == 1
    assert elapsed < 1.0


def test_a_notebook_line_of_300k_spaces_is_read_in_linear_time(tmp_path: Path) -> None:
    """The IPython-line test backtracked over the indentation: 70 s."""
    cells = [{"cell_type": "code", "source": [" " * 300_000 + "x = 1\n", GOOD], "metadata": {}}]
    (tmp_path / "wide.ipynb").write_text(json.dumps({"cells": cells, "nbformat": 4}))
    (tmp_path / "good.py").write_text(GOOD)
    elapsed, result = _timed_cli("check", "--no-cache", tmp_path)
    assert (
        "wide.ipynb:cell 1:1" in result.stdout and f"{tmp_path / 'good.py'}:3:10" in result.stdout
    )
    assert elapsed < 1.0


# -- notebooks of any shape --------------------------------------------------------
def _notebook(**document) -> str:
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "source": ["x = 1\n"]}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, **document})


BAD_NOTEBOOKS = {
    "nbformat as text": (_notebook(nbformat="4"), "nbformat is text, not a number"),
    "nbformat null": (_notebook(nbformat=None), "nbformat is null, not a number"),
    "metadata a list": (_notebook(metadata=[]), "metadata is a list, not an object"),
    "language_info text": (
        _notebook(metadata={"language_info": "python"}),
        "language_info is text, not an object",
    ),
    "a number among the source lines": (
        _notebook(cells=[{"cell_type": "code", "source": ["x = 1\n", 3]}]),
        "cell 1: source is a list of non-text",
    ),
    "no source": (_notebook(cells=[{"cell_type": "code"}]), "cell 1: a code cell without source"),
    "nested 100,000 deep": (
        '{"cells": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "JSON nested too deeply",
    ),
    "a 5,000-digit integer": (
        '{"nbformat": ' + "9" * 5000 + ', "cells": []}',
        "a number of more digits than Python reads",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_NOTEBOOKS))
def test_a_notebook_of_the_wrong_shape_is_a_one_line_error(tmp_path: Path, name: str) -> None:
    content, message = BAD_NOTEBOOKS[name]
    bad, good = tmp_path / "bad.ipynb", tmp_path / "good.py"
    bad.write_text(content)
    good.write_text(GOOD)
    check = run_cli("check", "--no-cache", tmp_path)
    assert check.exit_code == 2 and f"{good}:3:10: AMP201" in check.stdout
    assert check.stderr.count("\n") == 1 and check.stderr.startswith(f"amplint: error: {bad}: ")
    assert message in check.stderr
    fix = run_cli("fix", "--apply", "--no-cache", tmp_path)
    assert fix.exit_code == 2
    assert good.read_text() == GOOD_FIXED and bad.read_text() == content


def test_a_link_loop_named_on_the_command_line_is_an_error(tmp_path: Path) -> None:
    _link(tmp_path / "a.py", tmp_path / "b.py")
    _link(tmp_path / "b.py", tmp_path / "a.py")
    good = tmp_path / "good.py"
    good.write_text(GOOD)
    result = run_cli("fix", "--apply", "--no-cache", tmp_path / "a.py", good)
    assert result.exit_code == 2
    assert result.stderr == f"amplint: error: {tmp_path / 'a.py'}: a loop of links\n"
    assert good.read_text() == GOOD_FIXED


def test_a_3_gb_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.py"
    with huge.open("wb") as handle:  # sparse: no disk, and reading it would take minutes
        handle.truncate(3 * 1024**3)
    (tmp_path / "good.py").write_text(GOOD)
    elapsed, result = _timed_cli("check", "--no-cache", tmp_path)
    assert result.exit_code == 2 and "AMP201" in result.stdout
    assert f"{huge}: 3221 MB is more than amplint reads (268 MB)" in result.stderr
    assert elapsed < 1.0


# -- standard input: an editor gets a verified rewrite or its bytes back ---------------
def _fix_stdin(data: bytes, *args: str):
    return CliRunner().invoke(main, ["fix", "-", "--no-cache", *args], input=data)


@pytest.mark.parametrize(
    "data, why",
    [
        (b"# coding: utf-16\n" + GOOD.encode(), "does not spell ASCII"),
        (b"# coding: utf-7\n# +AGE-\n" + GOOD.encode(), "do not come back the same"),
        (b"\x7fELF\x00torch.cuda.amp", "binary file"),
        ((GOOD + "y = " + " or ".join(f"a{i}" for i in range(8000)) + "\n").encode(), "died"),
    ],
    ids=["utf-16 cookie", "utf-7", "binary", "crashing parser"],
)
def test_fix_on_stdin_prints_its_input_unchanged_when_it_cannot_fix(data: bytes, why: str) -> None:
    result = _fix_stdin(data)
    assert result.exit_code == 2 and why in result.stderr
    assert result.stdout_bytes == data


def test_fix_on_stdin_hands_back_its_input_on_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("select = [\n")
    result = _fix_stdin(GOOD.encode(), "--config", str(tmp_path / "bad.toml"))
    assert result.exit_code == 2 and "invalid TOML" in result.stderr
    assert result.stdout_bytes == GOOD.encode()


@pytest.mark.parametrize(
    "options, why",
    [
        (["--dtype", "float64"], "Invalid value for '--dtype'"),
        (["--no-such-flag"], "No such option"),
        (["-o", "/nonexistent-directory/report.txt"], "cannot write"),
    ],
    ids=["bad value", "unknown flag", "unwritable -o"],
)
def test_fix_on_stdin_hands_back_its_input_when_an_option_is_wrong(options, why) -> None:
    """The options are parsed before `fix -` reads its input: an editor still
    gets its buffer back, never an empty one.  In a real process (stdin a pipe)
    and twice in one (the second run is not told the first read it)."""
    run = subprocess.run(
        [sys.executable, "-m", "amplint", "fix", "-", *options],
        input=GOOD.encode(),
        capture_output=True,
    )
    assert run.returncode == 2 and why in run.stderr.decode()
    assert run.stdout == GOOD.encode()
    for _ in range(2):
        result = _fix_stdin(GOOD.encode(), *options)
        assert result.exit_code == 2 and result.stdout_bytes == GOOD.encode()
    help_text = _fix_stdin(GOOD.encode(), "--help")
    assert help_text.exit_code == 0 and GOOD not in help_text.stdout


def test_fix_on_stdin_keeps_a_latin_1_file_latin_1() -> None:
    data = b"# -*- coding: latin-1 -*-\n" + GOOD.encode() + b"name = 'caf\xe9'\n"
    result = _fix_stdin(data)
    assert result.exit_code == 0
    assert result.stdout_bytes == data.replace(
        b"torch.cuda.amp.GradScaler()", b'torch.amp.GradScaler("cuda")'
    )


# -- writes: owner, links, leftovers, what the summary counts -------------------------
def test_a_file_with_hard_links_is_refused_and_untouched(tmp_path: Path) -> None:
    target, twin, good = tmp_path / "train.py", tmp_path / "twin.py.txt", tmp_path / "good.py"
    target.write_text(GOOD)
    os.link(target, twin)
    good.write_text(GOOD)
    result = run_cli("fix", "--apply", "--no-cache", tmp_path)
    assert result.exit_code == 2
    assert f"{target}: cannot write: the file has 2 hard links" in result.stderr
    assert target.read_text() == twin.read_text() == GOOD
    assert os.stat(target).st_ino == os.stat(twin).st_ino
    assert "Fixed 1 finding in 1 file; 1 remaining." in result.stdout


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_fix_as_root_keeps_the_owner_and_group(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_text(GOOD)
    os.chown(target, 1234, 5678)
    target.chmod(0o640)
    result = run_cli("fix", "--apply", "--no-cache", target)
    assert result.exit_code == 0
    status = target.stat()
    assert (status.st_uid, status.st_gid, status.st_mode & 0o7777) == (1234, 5678, 0o640)
    assert target.read_text() == GOOD_FIXED


def test_a_failed_write_is_not_counted_as_fixed(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(GOOD)
    (tmp_path / "b.py").write_text(GOOD)
    (tmp_path / "c.py").write_text(GOOD)
    (tmp_path / "b.py").chmod(0o444)
    result = run_cli("fix", "--apply", "--no-cache", tmp_path)
    assert result.exit_code == 2
    assert "Fixed 2 findings in 2 files; 1 remaining." in result.stdout


def test_files_named_as_temporaries_are_never_deleted_for_their_name(tmp_path: Path) -> None:
    """`check`, a `fix` diff and `fix --apply` all leave them: only the journal
    of the run that made one removes it (tests/test_atomic_change.py)."""
    (tmp_path / "train.py").write_text(GOOD)
    stale = tmp_path / f".train.py.{dead_pid()}.k2j4_x.amplint-tmp"
    live = tmp_path / f".train.py.{os.getppid()}.q9w8_e.amplint-tmp"  # another run's work
    users = tmp_path / ".notes.amplint-tmp"  # not amplint's naming
    for path in (stale, live, users):
        path.write_text("half a file")
    for command in (["check"], ["fix"], ["fix", "--apply"]):
        result = run_cli(*command, "--no-cache", tmp_path)
        assert stale.exists() and live.exists() and users.exists()
        assert f"amplint: warning: {stale}: named as" in result.stderr
        assert str(live) not in result.stderr and str(users) not in result.stderr
    assert (tmp_path / "train.py").read_text() == GOOD_FIXED


def test_a_named_link_out_of_the_tree_is_refused_unless_asked(tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "shared.py").write_text(GOOD)
    _link(tree / "shared.py", outside / "shared.py")
    named = tree / "shared.py"  # as `amplint fix --apply *.py` names it
    refused = run_cli("fix", "--apply", "--no-cache", named)
    assert refused.exit_code == 2
    assert "a link to" in refused.stderr and "--write-through-links" in refused.stderr
    assert (outside / "shared.py").read_text() == GOOD
    written = run_cli("fix", "--apply", "--no-cache", "--write-through-links", named)
    assert written.exit_code == 0
    assert (outside / "shared.py").read_text() == GOOD_FIXED and named.is_symlink()


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("amplint.runner.run", interrupted)
    (tmp_path / "good.py").write_text(GOOD)
    result = run_cli("check", tmp_path)
    assert result.exit_code == 130 and result.stderr == "Aborted!\n"


# `python -m amplint` as a terminal starts it.  A shell's background job (`make
# test &`, `nohup`) starts with SIGINT ignored, its children inherit that, and
# Python then installs no handler: Ctrl-C could not reach the run at all.
_AS_FROM_A_TERMINAL = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('amplint', run_name='__main__', alter_sys=True)"
)


def test_sigint_during_analysis_exits_130_and_leaves_no_process(tmp_path: Path) -> None:
    for index in range(150):
        (tmp_path / f"m{index:03}.py").write_text(GOOD + STEP * 20)
    process = subprocess.Popen(
        [sys.executable, "-c", _AS_FROM_A_TERMINAL, "check", "--no-cache", "--jobs", "1"]
        + [str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    time.sleep(1.5)
    # A run that ended before the signal proves nothing about Ctrl-C.
    assert process.poll() is None, f"finished in {time.monotonic() - started:.1f} s, before SIGINT"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr.endswith("Aborted!\n")


# -- what people read: no file name writes a line of its own --------------------------
def test_control_characters_in_file_names_are_escaped(tmp_path: Path) -> None:
    name = "x\n::error file=ci.yml::injected\x1b[2J.py"
    try:
        (tmp_path / name).write_text(GOOD)
    except OSError:
        pytest.skip("this file system refuses such names")
    escaped = "x\\n::error file=ci.yml::injected\\x1b[2J.py"
    outputs = [
        run_cli("check", "--no-cache", tmp_path).stdout,
        run_cli("check", "--no-cache", "--output-format", "full", tmp_path).stdout,
        run_cli("fix", "--no-cache", tmp_path).stdout,
        run_cli("fix", "--apply", "--no-cache", tmp_path).stdout,
    ]
    for output in outputs:
        assert escaped in output
        assert not any(line.startswith("::") for line in output.splitlines())
        assert "\x1b" not in output


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_an_owner_that_cannot_be_kept_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a user who may not chown: refused, rather than the file becoming theirs."""
    target = tmp_path / "train.py"
    target.write_text(GOOD)
    os.chown(target, 1234, 1234)

    def not_permitted(*args) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "chown", not_permitted)
    result = run_cli("fix", "--apply", "--no-cache", target)
    assert result.exit_code == 2
    assert "belongs to user 1234, group 1234, which amplint may not give its rewrite" in (
        result.stderr
    )
    assert target.read_text() == GOOD and target.stat().st_uid == 1234
    assert not list(tmp_path.glob(".*.amplint-tmp"))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P is 3.11's")
def test_a_projects_keyword_py_stays_unrun_under_the_documented_commands(tmp_path: Path) -> None:
    """CPython imports `keyword` from the working directory before any of
    amplint runs under plain `python -m`; the `amplint` command and
    `python -P -m amplint`, which the README gives, never look there."""
    (tmp_path / "keyword.py").write_text("print('PLANTED')\n")
    console = Path(sys.executable).with_name("amplint")
    commands = [[sys.executable, "-P", "-m", "amplint", "--version"]]
    if console.exists():
        commands.append([str(console), "--version"])
    for command in commands:
        run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
        assert run.returncode == 0 and "PLANTED" not in run.stdout + run.stderr, command
    plain = subprocess.run(
        [sys.executable, "-m", "amplint", "--version"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "PLANTED" in plain.stdout  # why the README says -P: CPython's, not amplint's


@pytest.mark.skipif(not hasattr(os, "setxattr"), reason="Linux extended attributes")
def test_a_rewrite_keeps_the_files_extended_attributes(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_text(GOOD)
    try:
        os.setxattr(target, "user.origin", b"downloaded")
    except OSError:
        pytest.skip("this file system keeps no user attributes")
    assert run_cli("fix", "--apply", "--no-cache", target).exit_code == 0
    assert target.read_text() == GOOD_FIXED
    assert os.getxattr(target, "user.origin") == b"downloaded"


def test_a_file_replaced_by_a_fifo_before_the_write_is_refused_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between reading and writing, the file becomes a FIFO: the check that it
    is unchanged must not block on it (it did, in open(), for ever)."""
    from amplint import files, writes

    target = tmp_path / "train.py"
    target.write_text(GOOD)
    source = files.read_source(target)
    target.unlink()
    os.mkfifo(target)
    started = time.monotonic()
    with pytest.raises(files.SourceError, match="changed since amplint read it"):
        writes.write_source_atomic(source, GOOD_FIXED)
    assert time.monotonic() - started < 5


def test_a_parser_crash_is_one_line_not_a_stack_dump(tmp_path: Path) -> None:
    """libcst's native parser overflows on an `or` of thousands of terms and
    takes its process down: the run reports it in one line; the child's
    faulthandler (on under pytest and -X faulthandler) no longer dumps a
    stack that reads like a crash of amplint's own."""
    target = tmp_path / "deep.py"
    target.write_text(GOOD + "y = " + " or ".join(f"a{i}" for i in range(8000)) + "\n")
    run = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-m", "amplint", "check", "--no-cache", target],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "the process analysing this file died" in run.stderr
    assert "Fatal Python error" not in run.stderr and "Current thread" not in run.stderr


def test_a_file_over_its_budget_gets_one_line_and_the_others_their_results(tmp_path: Path) -> None:
    """A million blank lines took libcst 10 s, a generated file minutes: a
    file over file-line-limit is not parsed, one over file-time-limit is
    stopped; each gets an error line, a good file beside it its findings, and
    the settings move the limits."""
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "blank.py").write_text(GOOD + "\n" * 300_000)
    function = (
        "def train_{i}(model, loader, optimizer):\n"
        "    for x, y in loader:\n"
        "        loss = model(x).sub(y).pow(2).mean()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        optimizer.zero_grad()\n"
    )
    # 5,000 steps take this machine about 20 s; the limit stops it after 1,
    # and leaves the small file (milliseconds) ample time however loaded.
    (tmp_path / "many.py").write_text("".join(function.format(i=i) for i in range(5_000)))
    result = run_cli("check", "--no-cache", tmp_path, "--config", "file-time-limit = 1")
    assert result.exit_code == 2
    assert "blank.py: not analysed: 300,004 lines, above file-line-limit 200,000" in result.stderr
    assert "many.py: not analysed: took longer than file-time-limit 1 s" in result.stderr
    assert "good.py:3:10: AMP201" in result.stdout
    raised = run_cli(
        "check", "--no-cache", tmp_path / "blank.py", "--config", "file-line-limit = 400000"
    )
    assert raised.exit_code == 1 and "blank.py:3:10: AMP201" in raised.stdout
    for bad in ("file-line-limit = 0", "file-time-limit = true", 'file-line-limit = "many"'):
        refused = run_cli("check", "--no-cache", tmp_path / "good.py", "--config", bad)
        assert refused.exit_code == 2 and "must be a positive number" in refused.stderr
    # Ten million seconds overflowed the workers' selector (a traceback, no
    # result for any file): now one line naming the key.
    huge = run_cli("check", "--no-cache", tmp_path, "--config", "file-time-limit = 10000000")
    assert huge.exit_code == 2 and "Traceback" not in huge.stderr
    assert "`file-time-limit` must be at most 86,400 seconds" in huge.stderr


def test_an_oversized_file_is_refused_before_anything_reads_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 5 MB module was refused only after the prefilter had compiled it
    (seconds, 600 MB; 39 s under load): the size and line limits are asked
    first, and a generated module with no word any rule looks for passes."""
    from amplint import prefilter

    def never(self):
        raise AssertionError("compiled an oversized file")

    monkeypatch.setattr(prefilter.SourceClues, "_compiled", property(never))
    step = GOOD * 40_000  # a deprecated scaler, over and over: 2.2 MB
    (tmp_path / "steps.py").write_text(step)
    (tmp_path / "generated.py").write_text("x = 1\n" * 600_000)  # 3.6 MB, no trigger word
    result = run_cli("check", "--no-cache", tmp_path)
    assert re.search(r"steps.py: not analysed: 2\.\d MB is more than amplint parses", result.stderr)
    assert "generated.py" not in result.stderr + result.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_file_swapped_for_a_fifo_after_the_walk_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    from amplint.files import SourceError, read_source

    os.mkfifo(tmp_path / "train.py")
    with pytest.raises(SourceError, match="not a regular file"):
        read_source(tmp_path / "train.py")  # opened non-blocking: no wait for a writer


def test_the_command_exits_with_its_code_and_every_line_it_wrote(tmp_path: Path) -> None:
    # `amplint` and `python -m amplint` end without tearing the interpreter
    # down (amplint.cli.run): every line the run wrote to a pipe (1,500
    # findings, more than a pipe holds) must arrive, and the exit code must
    # be the command's.
    for index in range(300):
        (tmp_path / f"m{index}.py").write_text(GOOD * 5)
    expected = run_cli("check", "--no-cache", tmp_path)
    command = [sys.executable, "-P", "-m", "amplint"]
    run = subprocess.run(
        [*command, "check", "--no-cache", str(tmp_path)], capture_output=True, text=True
    )
    assert (run.returncode, run.stdout) == (expected.exit_code, expected.output) == (1, run.stdout)
    assert run.stdout.count("AMP201") == 1500
    usage = subprocess.run([*command, "check", "--bogus"], capture_output=True, text=True)
    assert usage.returncode == 2 and "No such option" in usage.stderr
    clean = subprocess.run(
        [*command, "check", "--no-cache", str(tmp_path / "m0.py"), "--select", "AMP001"],
        capture_output=True,
        text=True,
    )
    assert (clean.returncode, clean.stdout.strip()) == (0, "All checks passed.")
