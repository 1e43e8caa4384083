"""Time `amplint check` and `fix` on a large real tree, next to ruff with one rule.

    python tests/bench.py [--tree PATH] [--repeat N]      (or: make bench)

The default tree is the installed torch package (the test extra pins torch
2.13.0), found without importing it.  Each command runs as its own process, as
a user runs it; a row is the median of --repeat runs.  "cold" starts from an
empty cache, "warm" from the cache its cold run left.  This is a benchmark,
not a test: it prints figures, it asserts only that every way of running
reports the same findings.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amplint.config import Settings
from amplint.files import Discovered, discover
from amplint.runner import default_jobs

AMPLINT = [sys.executable, "-m", "amplint"]
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def installed_torch() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("bench: torch is not installed; pass --tree or install the test extra")
    return Path(spec.submodule_search_locations[0])


def _ruff() -> str | None:
    beside_python = Path(sys.executable).with_name("ruff")
    return str(beside_python) if beside_python.exists() else shutil.which("ruff")


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _size(tree: Path) -> tuple[int, int, int]:
    """Files amplint checks, their lines and bytes."""
    settings = Settings(root=tree)
    files = lines = size = 0
    for found in discover([tree], settings.all_excludes, settings.root):
        if isinstance(found, Discovered):
            data = found.path.read_bytes()
            files, lines, size = files + 1, lines + data.count(b"\n"), size + len(data)
    return files, lines, size


# An installed amplint runs from bytecode caches (pip writes them); a shell
# with PYTHONDONTWRITEBYTECODE set would compile every module on every run,
# about 30 ms a run, which no user pays.
CHILD_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def _timed(command: list[str], expect: frozenset[int] = frozenset({0, 1})) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=CHILD_ENV)
    elapsed = time.perf_counter() - start
    if result.returncode not in expect:
        sys.exit(f"bench: {' '.join(command)} exited {result.returncode}:\n{result.stderr}")
    return elapsed, result.stdout


def _median_of(repeat: int, run) -> tuple[float, str]:
    timings, outputs = [], set()
    for _ in range(repeat):
        elapsed, output = run()
        timings.append(elapsed)
        outputs.add(output)
    if len(outputs) != 1:
        sys.exit("bench: repeated runs disagree")
    return statistics.median(timings), outputs.pop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, help="default: the installed torch package")
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    tree = (options.tree or installed_torch()).resolve()
    scratch = Path(tempfile.mkdtemp(prefix="amplint-bench-"))
    try:
        rows = _measure(tree, scratch, options.repeat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    files, lines, size = _size(tree)
    print(f"tree: {tree}")
    print(f"      {files:,} files, {lines:,} lines, {size / 1e6:.1f} MB")
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs "
        f"({default_jobs()} usable), Python {platform.python_version()}"
    )
    print(
        f"versions: amplint {_version('amplint')}, libcst {_version('libcst')}, "
        f"ruff {_version('ruff')}, torch {_version('torch')}"
    )
    ruff_times = {run: seconds for command, run, seconds in rows if command.startswith("ruff")}
    print()
    print("| command | run | wall s | vs ruff |")
    print("|---|---|---:|---:|")
    for command, run, seconds in rows:
        # A one-file row is set against ruff on that file, the others against
        # ruff on the tree.
        ruff_time = ruff_times.get(run) or ruff_times.get("one rule")
        ratio = f"{seconds / ruff_time:.1f}x" if ruff_time else "n/a"
        shown = f"{seconds:.3f}" if seconds < 1 else f"{seconds:.2f}"  # 0.304 is not 0.30
        print(f"| `{command}` | {run} | {shown} | {ratio} |")
    timings = {(command, run): seconds for command, run, seconds in rows}
    cold = timings["amplint check", "cold cache"]
    warm = timings["amplint check", "warm cache"]
    print(f"\nwarm check is {cold / warm:.1f}x faster than cold")


def _measure(tree: Path, scratch: Path, repeat: int) -> list[tuple[str, str, float]]:
    """(command, how it ran, median wall seconds) rows."""
    rows: list[tuple[str, str, float]] = []
    ruff = _ruff()
    # Untimed: writes the bytecode caches of every module check and fix load.
    warm_up = scratch / "warm-up.py"
    shutil.copyfile(ONE_FILE["a training script with findings"], warm_up)
    _timed([*AMPLINT, "fix", "--apply", "--no-cache", str(warm_up)])
    if ruff is not None:
        command = [ruff, "check", "--select", "F401", "--no-cache", "--isolated", "--quiet"]
        seconds, _ = _median_of(repeat, lambda: _timed([*command, str(tree)]))
        rows.append(("ruff check --select F401 --no-cache --isolated", "one rule", seconds))

    def check(*options: str, cache: Path | None = None) -> tuple[float, str]:
        if cache is None:
            return _timed([*AMPLINT, "check", *options, "--no-cache", str(tree)])
        return _timed([*AMPLINT, "check", *options, "--cache-dir", str(cache), str(tree)])

    caches = iter(range(10**6))

    def cold() -> tuple[float, str]:
        return check(cache=scratch / f"cold-{next(caches)}")

    seconds, reference = _median_of(repeat, cold)
    rows.append(("amplint check", "cold cache", seconds))
    warm_cache = scratch / "warm"
    check(cache=warm_cache)
    seconds, output = _median_of(repeat, lambda: check(cache=warm_cache))
    _same(output, reference, "warm check")
    rows.append(("amplint check", "warm cache", seconds))
    seconds, output = _median_of(repeat, lambda: check("--jobs", "1"))
    _same(output, reference, "check --jobs 1")
    rows.append(("amplint check --no-cache --jobs 1", "one process", seconds))

    # fix on a tree with nothing left to fix: a copy that fix --apply has fixed.
    fixed_tree = scratch / "fixed" / tree.name
    shutil.copytree(tree, fixed_tree, symlinks=True)
    _timed([*AMPLINT, "fix", "--apply", "--no-cache", str(fixed_tree)])
    for command in ("check", "fix"):

        def cold_on_fixed(command: str = command) -> tuple[float, str]:
            cache = scratch / f"fixed-{next(caches)}"
            return _timed([*AMPLINT, command, "--cache-dir", str(cache), str(fixed_tree)])

        seconds, _ = _median_of(repeat, cold_on_fixed)
        rows.append((f"amplint {command}", "cold cache, nothing to fix", seconds))

    # fix --apply writing its rewrites, each run on a fresh copy (not timed).
    def fix_apply() -> tuple[float, str]:
        run = next(caches)
        copy = scratch / f"to-fix-{run}" / tree.name
        shutil.copytree(tree, copy, symlinks=True)
        cache = scratch / f"to-fix-cache-{run}"
        try:
            elapsed, _ = _timed([*AMPLINT, "fix", "--apply", "--cache-dir", str(cache), str(copy)])
        finally:
            shutil.rmtree(copy.parent)
        return elapsed, ""

    seconds, _ = _median_of(repeat, fix_apply)
    rows.append(("amplint fix --apply", "cold cache, writes its rewrites", seconds))
    return rows + _one_file_rows(ruff, repeat)


# What a pre-commit hook sees: one file, as a process of its own, no cache.
# A run of a third of a second moves by a tenth with the machine's mood: these
# rows take the median of at least this many runs.
ONE_FILE_REPEAT = 11
ONE_FILE = {
    "nothing could fire": installed_torch() / "nn" / "modules" / "linear.py",
    "a training script with findings": FIXTURES / "fp32_steps" / "nested_loops.py",
}


def _one_file_rows(ruff: str | None, repeat: int) -> list[tuple[str, str, float]]:
    rows = []
    repeat = max(repeat, ONE_FILE_REPEAT)
    for what, path in ONE_FILE.items():
        if ruff is not None:
            command = [ruff, "check", "--select", "F401", "--no-cache", "--isolated", "--quiet"]
            seconds, _ = _median_of(repeat, lambda: _timed([*command, str(path)]))
            rows.append((f"ruff check --select F401 {path.name}", f"one file, {what}", seconds))
        command = [*AMPLINT, "check", "--no-cache", str(path)]
        seconds, _ = _median_of(repeat, lambda: _timed(command))
        rows.append((f"amplint check {path.name}", f"one file, {what}", seconds))
    return rows


def _same(output: str, reference: str, what: str) -> None:
    if output != reference:
        sys.exit(f"bench: {what} reports something else than a cold check")


if __name__ == "__main__":
    main()
