"""Many files at once: worker processes and the result cache change how fast a
run is, never what it reports."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amplint import engine, runner
from amplint.cache import ResultCache
from amplint.config import Settings
from tests.helpers import FIXTURES, REPO, run_cli

SETTINGS = Settings(root=FIXTURES)
DEPRECATED = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"


def _summary(reports) -> list[tuple]:
    return [
        (
            report.path,
            report.error,
            report.fixed_text,
            [(d.code, d.message, d.span, d.fix and d.fix.message) for d in report.diagnostics],
            [d.code for d in report.applied],
        )
        for report in reports
    ]


@pytest.fixture
def worker_starts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records how many workers each run starts."""
    started: list[int] = []

    class CountingWorkers(runner.Workers):
        def __init__(self, jobs, analyse, count: int, deadline, **options) -> None:
            started.append(count)
            super().__init__(jobs, analyse, count, deadline, **options)

    monkeypatch.setattr(runner, "Workers", CountingWorkers)
    return started


@pytest.fixture
def pool_starts(worker_starts: list[int], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Several workers even for a small tree; records how many each run starts."""
    monkeypatch.setattr(runner, "PARALLEL_MIN_CHARS", 0)
    return worker_starts


@pytest.mark.slow
@pytest.mark.parametrize("fixing", [False, True])
def test_workers_report_what_one_process_reports(pool_starts: list[int], fixing: bool) -> None:
    alone = runner.run([FIXTURES], SETTINGS, fixing=fixing, jobs=1)
    assert pool_starts == [1]
    together = runner.run([FIXTURES], SETTINGS, fixing=fixing, jobs=2)
    assert pool_starts == [1, 2]
    assert _summary(together) == _summary(alone)
    assert any(report.diagnostics for report in alone)
    assert not fixing or any(report.fixed_text for report in alone)


def test_small_runs_start_one_worker(worker_starts: list[int], tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "b.py").write_text(DEPRECATED)
    reports = runner.run([tmp_path], Settings(root=tmp_path), jobs=8)
    assert [len(report.diagnostics) for report in reports] == [1, 1]
    assert worker_starts == [1]


_ANALYSE_WORK = runner.analyse_work


def _dies_on_crash_py(item):
    """Reaches the forked workers through the module."""
    if item.source.path.name == "crash.py":
        os._exit(3)  # as a segfault in native code or the OOM killer would
    return _ANALYSE_WORK(item)


def _stuck_in_native_code_on_slow_py(item):
    if item.source.path.name == "slow.py":
        # Native code holds the interpreter: the file's own alarm cannot stop it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(600)
    return _ANALYSE_WORK(item)


@pytest.mark.skipif(not runner.ISOLATED, reason="workers are forked")
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_worker_that_dies_costs_only_its_own_file(
    pool_starts: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jobs: int
) -> None:
    monkeypatch.setattr(runner, "analyse_work", _dies_on_crash_py)
    for name in ("a.py", "crash.py", "z.py"):
        (tmp_path / name).write_text(DEPRECATED)
    reports = runner.run([tmp_path], Settings(root=tmp_path), jobs=jobs)
    assert [report.path.name for report in reports] == ["a.py", "crash.py", "z.py"]
    assert [report.error for report in reports] == [
        None,
        "internal error: the process analysing this file died (exit status 3)",
        None,
    ]
    assert len(reports[0].diagnostics) == len(reports[2].diagnostics) == 1


@pytest.mark.skipif(not runner.ISOLATED, reason="workers are forked")
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_file_stuck_in_native_code_is_stopped_at_its_time_limit(
    pool_starts: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jobs: int
) -> None:
    monkeypatch.setattr(runner, "analyse_work", _stuck_in_native_code_on_slow_py)
    monkeypatch.setattr(runner, "WATCHDOG_GRACE_S", 0.5)
    for name in ("a.py", "slow.py", "z.py"):
        (tmp_path / name).write_text(DEPRECATED)
    started = time.monotonic()
    settings = Settings(root=tmp_path, file_time_limit=1.0)
    reports = runner.run([tmp_path], settings, jobs=jobs)
    assert time.monotonic() - started < 30
    assert [report.error for report in reports] == [
        None,
        "not analysed: took longer than file-time-limit 1 s",
        None,
    ]
    assert len(reports[0].diagnostics) == len(reports[2].diagnostics) == 1


# -- the cache ------------------------------------------------------------------
@pytest.fixture
def analysed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files the engine analyses (the cache did not answer)."""
    names: list[str] = []
    monkeypatch.setattr(runner, "ISOLATED", False)  # count in this process
    analyse = runner.analyse_source

    def counting(source, *args, **kwargs):
        names.append(source.path.name)
        return analyse(source, *args, **kwargs)

    monkeypatch.setattr(runner, "analyse_source", counting)
    return names


def _copy_fixtures(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    return tree


def test_a_warm_run_analyses_nothing_and_reports_the_same(
    analysed: list[str], tmp_path: Path
) -> None:
    tree = _copy_fixtures(tmp_path)
    cache = ResultCache(tmp_path / "cache")
    cold = runner.run([tree], SETTINGS, cache=cache)
    assert analysed
    analysed.clear()
    warm = runner.run([tree], SETTINGS, cache=ResultCache(tmp_path / "cache"))
    assert analysed == []
    assert _summary(warm) == _summary(cold)
    assert (tmp_path / "cache" / ".gitignore").read_text() == "*\n"


@pytest.fixture
def read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files the runner reads."""
    names: list[str] = []
    read_source = runner.read_source

    def counting(path, *args, **kwargs):
        names.append(Path(path).name)
        return read_source(path, *args, **kwargs)

    monkeypatch.setattr(runner, "read_source", counting)
    return names


def test_a_warm_run_does_not_read_files_their_text_ruled_out(
    read: list[str], tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "utils.py").write_text("def mean(values):\n    return sum(values) / len(values)\n")
    (tree / "legacy.py").write_text(DEPRECATED)
    cold = runner.run([tree], SETTINGS, cache=ResultCache(tmp_path / "cache"))
    assert sorted(read) == ["legacy.py", "utils.py"]
    read.clear()
    warm = runner.run([tree], SETTINGS, cache=ResultCache(tmp_path / "cache"))
    assert read == ["legacy.py"]  # a candidate: read, hashed, answered by its entry
    assert _summary(warm) == _summary(cold)

    # The verdict stands for that text, those codes, that file: any change reads it again.
    read.clear()
    (tree / "utils.py").write_text(DEPRECATED)  # now it has a finding
    [_, edited] = runner.run([tree], SETTINGS, cache=ResultCache(tmp_path / "cache"))
    assert sorted(read) == ["legacy.py", "utils.py"]
    assert [d.code for d in edited.diagnostics] == ["AMP201"]
    read.clear()
    other_codes = Settings(root=FIXTURES, select=("AMP001",))
    runner.run([tree], other_codes, cache=ResultCache(tmp_path / "cache"))
    assert sorted(read) == ["legacy.py", "utils.py"]


def test_a_damaged_index_of_ruled_out_files_is_read_as_empty(
    read: list[str], tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "utils.py").write_text("x = 1\n")
    cache = ResultCache(tmp_path / "cache")
    runner.run([tree], SETTINGS, cache=cache)
    [index] = (tmp_path / "cache").glob("ruled-out-*.json")
    for damaged in ("{", "[1, 2]", '{"/x": 1}'):
        index.write_text(damaged)
        read.clear()
        [report] = runner.run([tree], SETTINGS, cache=ResultCache(tmp_path / "cache"))
        assert read == ["utils.py"] and report.error is None


def test_an_edited_file_or_other_settings_miss_the_cache(
    analysed: list[str], tmp_path: Path
) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "b.py").write_text(DEPRECATED)
    cache = ResultCache(tmp_path / "cache")
    runner.run([tmp_path], Settings(root=tmp_path), cache=cache)
    analysed.clear()
    (tmp_path / "b.py").write_text(DEPRECATED + "# edited\n")
    runner.run([tmp_path], Settings(root=tmp_path), cache=cache)
    assert analysed == ["b.py"]
    analysed.clear()
    runner.run([tmp_path], Settings(root=tmp_path, target_torch=(2, 2)), cache=cache)
    assert sorted(analysed) == ["a.py", "b.py"]  # largest first
    analysed.clear()
    runner.run([tmp_path], Settings(root=tmp_path, ignore=("AMP001",)), cache=cache)
    assert sorted(analysed) == ["a.py", "b.py"]


def test_a_damaged_entry_is_a_miss(analysed: list[str], tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    cache_dir = tmp_path / "cache"
    (first,) = runner.run([tmp_path], Settings(root=tmp_path), cache=ResultCache(cache_dir))
    for entry in cache_dir.glob("*.json"):
        entry.write_bytes(b'{"diagnostics": [["AMP201", "x", [1, 2], null]]}')
    analysed.clear()
    (again,) = runner.run([tmp_path], Settings(root=tmp_path), cache=ResultCache(cache_dir))
    assert analysed == ["a.py"]
    assert _summary([again]) == _summary([first])


def test_a_well_formed_entry_about_another_file_is_a_miss(
    analysed: list[str], tmp_path: Path
) -> None:
    """An entry naming a cell the notebook does not have crashed
    `--output-format full`: entries are checked against the file they serve."""
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "source": DEPRECATED}
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": [cell], "nbformat": 4}))
    cache_dir = tmp_path / "cache"
    runner.run([tmp_path], Settings(root=tmp_path), cache=ResultCache(cache_dir))
    (entry,) = cache_dir.glob("*.json")
    entry.write_text('{"diagnostics": [["AMP201", "planted", [3, 10, 3, 20, 99], null]]}')
    analysed.clear()
    result = run_cli("check", "--output-format", "full", "--cache-dir", cache_dir, tmp_path)
    assert result.exit_code == 1 and "nb.ipynb:cell 1:3:10: AMP201" in result.stdout
    assert "planted" not in result.stdout


def test_a_module_whose_text_is_a_notebooks_code_has_its_own_entry(tmp_path: Path) -> None:
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "source": DEPRECATED}
    (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": [cell], "nbformat": 4}))
    (tmp_path / "same.py").write_text(DEPRECATED)  # the notebook's code, joined
    cache = ResultCache(tmp_path / "cache")
    runner.run([tmp_path / "nb.ipynb"], Settings(root=tmp_path), cache=cache)
    (module,) = runner.run([tmp_path / "same.py"], Settings(root=tmp_path), cache=cache)
    assert [d.span.cell for d in module.diagnostics] == [None]


def test_a_cache_left_without_its_tags_is_repaired(tmp_path: Path) -> None:
    """A full disk left an empty .gitignore and no CACHEDIR.TAG behind."""
    (tmp_path / "a.py").write_text(DEPRECATED)
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / ".gitignore").write_text("")
    runner.run([tmp_path], Settings(root=tmp_path), cache=ResultCache(cache_dir))
    assert (cache_dir / ".gitignore").read_text() == "*\n"
    assert (cache_dir / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172")


def test_fix_with_nothing_to_fix_does_what_check_does(
    analysed: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same parses and no more code generation; and answered from check's
    cache entries without analysis."""
    parses: list[str] = []
    parse_module = engine.cst.parse_module
    monkeypatch.setattr(
        engine.cst, "parse_module", lambda text: parses.append("parse") or parse_module(text)
    )
    generate = engine.cst.Module.code
    monkeypatch.setattr(
        engine.cst.Module,
        "code",
        property(lambda module: parses.append("generate") or generate.fget(module)),
    )
    tree = FIXTURES / "not_steps"  # findings, but none a safe fix changes
    runner.run([tree], SETTINGS)
    checked = list(parses)
    parses.clear()
    reports = runner.run([tree], SETTINGS, fixing=True)
    assert parses == checked and "parse" in checked
    assert not any(report.fixed_text for report in reports)

    cache = ResultCache(tmp_path / "cache")
    runner.run([tree], SETTINGS, cache=cache)
    analysed.clear()
    from_cache = runner.run([tree], SETTINGS, fixing=True, cache=cache)
    assert analysed == []
    assert _summary(from_cache) == _summary(reports)


def test_fix_analyses_a_cached_file_that_has_a_fix(analysed: list[str], tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    cache = ResultCache(tmp_path / "cache")
    runner.run([tmp_path], Settings(root=tmp_path), cache=cache)
    analysed.clear()
    (report,) = runner.run([tmp_path], Settings(root=tmp_path), fixing=True, cache=cache)
    assert analysed == ["a.py"]
    assert "torch.amp.GradScaler" in report.fixed_text


# -- the command line -----------------------------------------------------------
def test_an_unwritable_cache_warns_once_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "b.py").write_text(DEPRECATED)
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    result = run_cli(
        "check", "--cache-dir", blocker / "cache", tmp_path / "a.py", tmp_path / "b.py"
    )
    assert result.exit_code == 1
    assert result.stdout.count("AMP201") == 2
    assert result.stderr.count("warning: cannot write the cache") == 1


def test_no_cache_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED)
    result = run_cli("check", "--no-cache", "--cache-dir", tmp_path / "cache", tmp_path / "a.py")
    assert result.exit_code == 1
    assert not (tmp_path / "cache").exists()


def test_jobs_must_be_positive(tmp_path: Path) -> None:
    result = run_cli("check", "--jobs", "0", tmp_path)
    assert result.exit_code == 2
    assert "--jobs must be at least 1" in result.stderr


@pytest.mark.slow
def test_concurrent_runs_share_a_cache(tmp_path: Path) -> None:
    tree = _copy_fixtures(tmp_path)
    command = [sys.executable, "-m", "amplint", "check", "--cache-dir", str(tmp_path / "cache")]
    expected = subprocess.run(
        [*command[:-2], "--no-cache", str(tree)], capture_output=True, text=True, cwd=REPO
    ).stdout
    runs = [
        subprocess.Popen([*command, str(tree)], stdout=subprocess.PIPE, text=True, cwd=REPO)
        for _ in range(4)
    ]
    assert [run.communicate()[0] for run in runs] == [expected] * 4
    assert not list((tmp_path / "cache").glob("*.tmp"))
    warm = subprocess.run([*command, str(tree)], capture_output=True, text=True, cwd=REPO)
    assert warm.stdout == expected


@pytest.mark.skipif(not runner.ISOLATED, reason="workers are forked")
def test_a_job_is_analysed_while_the_next_is_still_being_found(tmp_path: Path) -> None:
    # The run reads and rules out files while the workers analyse the first
    # ones: a job goes out as soon as it is found, not once all are.
    first_done = tmp_path / "first-done"

    def jobs():
        yield "first"
        deadline = time.monotonic() + 30
        while not first_done.exists():
            assert time.monotonic() < deadline, "the first job waited for the next to be found"
            time.sleep(0.01)
        yield "second"

    def analyse(job: str) -> str:
        if job == "first":
            first_done.write_text("")
        return job.upper()

    results = dict(runner.Workers(jobs(), analyse, 1, deadline=None).results())
    assert results == {0: "FIRST", 1: "SECOND"}


@pytest.mark.skipif(not runner.ISOLATED, reason="workers are forked")
def test_each_job_is_stopped_at_its_own_deadline() -> None:
    # A closer configuration may give its files a longer file-time-limit than
    # the run's: the watchdog asks each job for its own.
    def analyse(seconds: float) -> float:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # as native code would
        time.sleep(seconds)
        return seconds

    limits = {0.2: 0.05, 0.3: 30.0}  # how long it runs -> how long it may
    workers = runner.Workers([0.2, 0.3], analyse, 2, deadline=lambda seconds: limits[seconds])
    results = dict(workers.results())
    assert isinstance(results[0], runner.Lost) and results[0].overdue
    assert results[0].why == "took longer than 0.05 s"
    assert results[1] == 0.3
