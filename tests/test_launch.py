"""The command forks its first worker as it starts (amplint/launch.py), so
that libcst and the rules load while the command line does: the worker
analyses the first file, the command itself never loads them, and a run that
analyses nothing leaves no process behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import launch
from tests.helpers import REPO, dedent

# Runs the command as the `amplint` script does, and reports as it exits
# whether this process loaded libcst, how many processes it forked and which
# of them are still there (not reaped).
PROBE = """
import json, os, sys
parent, forked = os.getpid(), []
real_fork, real_exit = os.fork, os._exit

def fork():
    pid = real_fork()
    if pid:
        forked.append(pid)
    return pid

def leave(code):
    if os.getpid() == parent:
        alive = []
        for pid in forked:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        report = {"libcst": "libcst" in sys.modules, "forked": len(forked), "alive": alive}
        print("PROBE " + json.dumps(report), file=sys.stderr)
    real_exit(code)

os.fork, os._exit = fork, leave
sys.argv = ["amplint", *sys.argv[1:]]
from amplint.launch import run
run()
"""

TRAIN = dedent("""
    import torch

    scaler = torch.cuda.amp.GradScaler()
    """)

two_cpus = pytest.mark.skipif(
    not launch._worker_starts_early(["check"]), reason="needs fork and a second CPU"
)


def _probe(*arguments: str | Path) -> tuple[subprocess.CompletedProcess, dict]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, arguments)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    [line] = [line for line in run.stderr.splitlines() if line.startswith("PROBE ")]
    return run, json.loads(line.removeprefix("PROBE "))


@two_cpus
def test_the_first_file_is_analysed_by_the_worker_forked_as_the_command_started(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    run, seen = _probe("check", "--no-cache", tmp_path / "train.py")
    assert run.returncode == 1 and "train.py:3:10: AMP201" in run.stdout
    assert seen == {"libcst": False, "forked": 1, "alive": []}


@two_cpus
def test_a_run_with_nothing_to_analyse_stops_the_early_worker(tmp_path: Path) -> None:
    (tmp_path / "utils.py").write_text("def count(items):\n    return len(items)\n")
    run, seen = _probe("check", "--no-cache", tmp_path / "utils.py")
    assert run.returncode == 0 and "All checks passed" in run.stdout
    assert seen == {"libcst": False, "forked": 1, "alive": []}
    usage, seen = _probe("fix", "--bogus")
    assert usage.returncode == 2 and seen == {"libcst": False, "forked": 1, "alive": []}


@two_cpus
def test_more_files_than_one_worker_share_the_early_worker_and_the_runs_own(
    tmp_path: Path,
) -> None:
    for index in range(40):
        (tmp_path / f"m{index:02}.py").write_text(TRAIN * 200)  # enough for two workers
    run, seen = _probe("check", "--no-cache", "--jobs", "2", tmp_path)
    assert run.returncode == 1 and run.stdout.count("AMP201") == 40 * 200
    # The run loads the engine before it forks its own worker.
    assert seen == {"libcst": True, "forked": 2, "alive": []}


def test_only_check_and_fix_on_a_second_cpu_start_a_worker_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert launch._worker_starts_early(["check", "src"])
    assert launch._worker_starts_early(["fix", "--apply", "src"])
    for other in (["rules"], ["verify", "train.py"], ["--version"], []):
        assert not launch._worker_starts_early(other)
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not launch._worker_starts_early(["check", "src"])
