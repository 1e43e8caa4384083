"""Run a subset of the ecosystem's training scripts, and amplint's rewrites of
them, for a few steps on the CPU; then `amplint verify` them.

    python -m tests.ecosystem_runnable [--clones DIR] [--only NAME] [--jobs N]
    python -m tests.ecosystem_runnable --only NAME... --export DIR

Each module in tests/ecosystem/runnable/ adapts one script of
tests/ecosystem/corpus.toml so that it runs here in seconds, without its data
or the GPU it was written for.  An adapter holds no copy of the script: only

    REPO, PATH   the script, read from the clone at the commit the corpus pins
    ARGV         its command line
    EDITS        (old, new) replacements, each of which must match exactly once,
                 so that a script that drifts, or a rewrite that moves the code
                 an edit needs, is caught rather than silently adapted
    FILES        synthetic data files to write beside the repository's files
    ENV          environment variables for the script
    STEPS        the most optimizer steps a run may take (default 30)
    RTOL         verify's --rtol, where the default 5 % does not fit the script
    DECLINED     {column: words of the finding}: settings amplint must decline
                 to rewrite the script for, with a finding saying so (float16
                 autocast of an LSTM on a CPU without float16 kernels)
    REWRITE      the project modules the script imports whose training step
                 it runs (a driver of a trainer package): `fix` rewrites them
                 with the script, each run uses their rewrite, and verify
                 gets them with --rewrite; each is in the corpus

The datasets come from small stand-ins for torchvision and matplotlib
(tests/ecosystem/runnable/stubs/, put on PYTHONPATH), neither of which is
installed here.

For each adapter, the repository is exported at its commit (tests/ecosystem.py)
and `fix` rewrites the script three times, seeing the whole tree as `make
ecosystem` does: with its defaults (CUDA autocast and GradScaler; fix may leave
a script that never leaves the CPU alone), with `--device-type cpu --dtype
bfloat16`, and with `--device-type cpu --dtype float16`, where torch's
GradScaler("cpu") raises on a missing update(), a second unscale_ or a step on
an optimizer the scaler never saw, as it would on a GPU.  The edits are applied
to the original and to each rewrite, and the programs run under amplint
verify's harness, which records every step's loss and stops a script after
STEPS steps.  Each must exit 0, take a step the scaler did not skip, and report
finite losses; without CUDA, where the default rewrite's AMP is disabled, that
rewrite must reproduce the original's losses to the bit.  Then `amplint verify`
runs on the adapted original with the two CPU settings and must pass; and its
rewrite of the adapted original must be the adapted rewrite that ran, so that
what verify passes is what `fix` writes.

Prints a table, one row per script, and "runnable subset: P of N passed";
exits 1 when any fails.  A missing clone is reported and skipped.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from amplint.config import Settings
from amplint.files import read_source
from amplint.runner import run
from amplint.verify import VerifyError
from amplint.verify.rewrite import rewritten
from tests.ecosystem import CORPUS, _clone, _export, default_clones, tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = REPO_ROOT / "tests" / "ecosystem" / "runnable"
STUBS = ADAPTERS / "stubs"

# The fix settings each rewrite is made with, by column.
REWRITES: dict[str, dict[str, str]] = {
    "default": {},
    "bf16": {"device_type": "cpu", "dtype": "bfloat16"},
    "fp16": {"device_type": "cpu", "dtype": "float16"},
}
VERIFIED = ("bf16", "fp16")  # verify needs AMP that is active on this machine
COLUMNS = ("original", *REWRITES, *(f"verify {name}" for name in VERIFIED), "same rewrite")
TIMEOUT_S = 180.0  # for one program, or for one verify (which runs two)


class AdapterError(Exception):
    """An adapter that does not fit its script."""


@dataclass(frozen=True)
class Adapter:
    name: str
    repo: str
    path: str
    argv: tuple[str, ...] = ()
    edits: tuple[tuple[str, str], ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    steps: int = 30
    declined: Mapping[str, str] = field(default_factory=dict)
    rtol: float | None = None
    rewrite: tuple[str, ...] = ()

    def adapt(self, text: str) -> str:
        for number, (old, new) in enumerate(self.edits, 1):
            count = text.count(old)
            if count != 1:
                raise AdapterError(f"edit {number} ({_first_line(old)!r}) matches {count} times")
            text = text.replace(old, new)
        return text


_FIELDS = {"REPO": "repo", "PATH": "path", "ARGV": "argv", "EDITS": "edits"}
_FIELDS |= {
    "FILES": "files",
    "ENV": "env",
    "STEPS": "steps",
    "DECLINED": "declined",
    "RTOL": "rtol",
    "REWRITE": "rewrite",
}


def _corpus() -> dict[str, dict]:
    """The corpus's entries (commit, files) by repository."""
    entries = tomllib.loads(CORPUS.read_text(encoding="utf-8"))["repo"]
    return {entry["name"]: entry for entry in entries}


def load_adapters(directory: Path = ADAPTERS) -> list[Adapter]:
    """Every adapter in `directory`; AdapterError when one is malformed or
    names a script that is not in the corpus."""
    corpus = _corpus()
    adapters = []
    for path in sorted(directory.glob("[!_]*.py")):
        spec = importlib.util.spec_from_file_location(f"_runnable_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        declared = {name for name in vars(module) if name.isupper() and name[0] != "_"}
        if unknown := declared - _FIELDS.keys():  # a misspelt field would be ignored
            raise AdapterError(f"{path.name}: unknown {', '.join(sorted(unknown))}")
        adapter = Adapter(path.stem, **{_FIELDS[name]: getattr(module, name) for name in declared})
        for named in (adapter.path, *adapter.rewrite):
            if named not in corpus.get(adapter.repo, {}).get("files", ()):
                raise AdapterError(f"{path.name}: {adapter.repo}:{named} is not in the corpus")
        adapters.append(adapter)
    return adapters


@dataclass
class Row:
    name: str
    cells: dict[str, str] = field(default_factory=dict)  # by column; "-" when absent
    failures: list[str] = field(default_factory=list)
    skipped: str = ""  # why nothing ran
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.skipped and not self.failures

    def fail(self, column: str, message: str) -> None:
        self.cells[column] = "FAIL"
        self.failures.append(f"{column}: {message}")


@dataclass
class Plan:
    """An adapter's programs, ready to run: the exported tree and the text to
    put at the script's path, by column."""

    adapter: Adapter
    tree: Path
    programs: dict[str, str]
    row: Row
    # By column: the rewrite of each module of REWRITE that fix changed.
    modules: dict[str, dict[str, str]] = field(default_factory=dict)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def prepare(adapter: Adapter, clones: Path, commit: str, scratch: Path) -> Plan:
    """Export, rewrite and adapt: the part in this process (one adapter at a
    time: amplint is not meant to run in threads)."""
    row = Row(adapter.name)
    plan = Plan(adapter, scratch / adapter.name / "tree", {}, row)
    git_dir = _clone(clones, adapter.repo)
    if git_dir is None:
        row.skipped = f"no clone of {adapter.repo}"
    elif (error := _export(git_dir, commit, plan.tree)) is not None:
        row.skipped = f"cannot export {adapter.repo} at {commit[:12]}: {error}"
    elif not (plan.tree / adapter.path).is_file():
        row.skipped = f"{adapter.path} is not in the clone at {commit[:12]}"
    if row.skipped:
        return plan
    script = plan.tree / adapter.path
    original = read_source(script).text
    try:
        plan.programs["original"] = adapter.adapt(original)
    except AdapterError as error:
        row.fail("original", f"the adapter does not fit the original: {error}")
        return plan
    paths = [script, *(plan.tree / module for module in adapter.rewrite)]
    for column, options in REWRITES.items():
        report, *others = run(paths, Settings(root=plan.tree, **options), fixing=True)
        modules = {
            module: other.fixed_text
            for module, other in zip(adapter.rewrite, others)
            if other.fixed_text is not None
        }
        error = report.error or next((other.error for other in others if other.error), None)
        if column in adapter.declined:
            words = adapter.declined[column]
            findings = [finding for one in (report, *others) for finding in one.diagnostics]
            if (
                report.fixed_text is None
                and not modules
                and any(words in finding.message for finding in findings)
            ):
                row.cells[column] = "declined, as expected"
            else:
                row.fail(column, f"fix was expected to decline it, saying {words!r}")
            continue
        if (report.fixed_text is None and not modules) or error:
            if column in VERIFIED or error:
                row.fail(column, f"fix did not rewrite it ({error or 'nothing to fix'})")
            else:  # fix leaves a script that never leaves the CPU alone under CUDA settings
                row.cells[column] = "not rewritten"
            continue
        try:
            plan.programs[column] = adapter.adapt(report.fixed_text or original)
        except AdapterError as error:
            row.fail(column, f"an edit that fits the original does not fit the rewrite: {error}")
            continue
        plan.modules[column] = modules
    _check_same_rewrite(plan, scratch / adapter.name / "adapted")
    return plan


def _check_same_rewrite(plan: Plan, directory: Path) -> None:
    """What verify rewrites (the adapted original, alone) must be what ran (the
    adapted rewrite of the original, made in the exported tree)."""
    if "original" not in plan.programs:
        return
    adapter = plan.adapter
    if adapter.rewrite:  # the script with the modules it imports, in the tree
        script = _workspace(adapter, plan.tree, plan.programs["original"], directory)
    else:
        directory.mkdir(parents=True)
        script = directory / Path(adapter.path).name
        script.write_text(plan.programs["original"], encoding="utf-8")
    modules = [directory / module for module in adapter.rewrite]
    differences = []
    for column in VERIFIED:
        if column not in plan.programs or column in adapter.declined:
            continue
        try:
            settings = Settings(root=directory, **REWRITES[column])
            verified = rewritten(script, settings, False, modules)
        except VerifyError as error:
            differences.append(f"{column}: verify cannot rewrite it: {error}")
            continue
        ran = {directory / module: text for module, text in plan.modules[column].items()}
        pairs = [(adapter.path, plan.programs[column], verified.script)]
        pairs += [
            (
                str(path.relative_to(directory)),
                ran.get(path, ""),
                verified.modules.get(path.resolve(), ""),
            )
            for path in modules
        ]
        for name, what_ran, what_verify_runs in pairs:
            if what_ran == what_verify_runs:
                continue
            diff = difflib.unified_diff(
                what_ran.splitlines(True),
                what_verify_runs.splitlines(True),
                f"adapted rewrite of {name} ({column})",
                f"rewrite of the adapted original's {name} ({column})",
            )
            differences.append("".join(diff))
    if differences:
        plan.row.fail("same rewrite", "\n".join(differences))
    else:
        plan.row.cells["same rewrite"] = "ok"


def execute(plan: Plan, scratch: Path) -> Row:
    """Run the programs, then verify: the part in child processes."""
    row, adapter = plan.row, plan.adapter
    started = time.monotonic()
    results = {}
    for column, text in plan.programs.items():
        into = scratch / adapter.name / column
        result = _run_program(adapter, plan.tree, text, into, plan.modules.get(column, {}))
        if isinstance(result, str):
            row.fail(column, result)
            continue
        results[column] = result
        skipped = f", {result['skipped_steps']} skipped" if result["skipped_steps"] else ""
        row.cells[column] = f"ok ({result['steps']}{skipped})"
    if "original" in results and "default" in results:
        if (
            difference := _inactive_amp_differs(results["original"], results["default"])
        ) is not None:
            row.fail("default", difference)
    if "original" in results:
        for column in (column for column in VERIFIED if column not in adapter.declined):
            passed, outcome = _verify(adapter, plan, column, results["original"]["steps"], scratch)
            if passed:
                row.cells[f"verify {column}"] = outcome
            else:
                row.fail(f"verify {column}", outcome)
    row.seconds = time.monotonic() - started
    return row


def _inactive_amp_differs(original: dict, default: dict) -> str | None:
    """Without CUDA, the default rewrite's autocast and GradScaler are disabled:
    it must then compute what the original computes, to the bit (both runs are
    seeded alike and use one thread)."""
    if default["cuda_available"] or original["losses"] == default["losses"]:
        return None
    pairs = zip(original["losses"], default["losses"])
    for step, (before, after) in enumerate(pairs, 1):
        if before != after:
            return f"AMP is off without CUDA, yet step {step}'s loss is {after}, not {before}"
    return f"AMP is off without CUDA, yet it ran {default['steps']} steps, not {original['steps']}"


def _workspace(
    adapter: Adapter, tree: Path, text: str, into: Path, modules: Mapping[str, str] = {}
) -> Path:
    """A copy of the tree with `text` at the script's path, `modules` (relative
    path -> text) at theirs and the adapter's files beside them, so that no run
    sees what another left; returns the script."""
    shutil.copytree(tree, into)
    for relative, content in {**adapter.files, **modules}.items():
        (into / relative).parent.mkdir(parents=True, exist_ok=True)
        (into / relative).write_text(content, encoding="utf-8")
    script = into / adapter.path
    script.write_text(text, encoding="utf-8")
    return script


def _environment(adapter: Adapter) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STUBS), env.get("PYTHONPATH")]))
    # One thread a run: runs go side by side, and losses do not depend on the machine's cores.
    env["OMP_NUM_THREADS"] = "1"
    # A free port for the scripts that start a process group (single-process, gloo).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", str(probe.getsockname()[1])
    env.update(adapter.env)
    return env


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int | None, str, str]:
    """(exit status, or None when it ran out of time; stdout; stderr).  The
    child leads its own process group, so DataLoader workers die with it."""
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=stdout, stderr=stderr, start_new_session=True
        )
        try:
            status: int | None = child.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            status = None
        stdout.seek(0)
        stderr.seek(0)
        return (
            status,
            stdout.read().decode(errors="replace"),
            stderr.read().decode(errors="replace"),
        )


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def _run_program(
    adapter: Adapter, tree: Path, text: str, into: Path, modules: Mapping[str, str]
) -> dict | str:
    """Run one program under verify's harness: what the harness measured (its
    JSON), or why the run failed."""
    script = _workspace(adapter, tree, text, into, modules)
    out = into.with_suffix(".json")
    command = [sys.executable, "-m", "amplint.verify.harness", "--source", str(script)]
    command += ["--script", str(script), "--steps", str(adapter.steps), "--out", str(out)]
    status, stdout, stderr = _run(
        command + ["--", *adapter.argv], script.parent, _environment(adapter)
    )
    tail = _tail(stdout + stderr)
    if status is None:
        return f"no end within {TIMEOUT_S:g} s\n{tail}"
    try:
        result = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"the harness exited with status {status} before reporting\n{tail}"
    losses = [float(loss) for loss in result["losses"]]  # "nan" and "inf" come as strings
    if result["exit_status"] != 0:
        return f"exited with status {result['exit_status']} after {result['steps']} steps\n{tail}"
    if result["steps"] == 0:
        return f"ended without an optimizer step\n{tail}"
    if result["skipped_steps"] == result["steps"]:
        return f"the scaler skipped all {result['steps']} steps: nothing was trained\n{tail}"
    if not all(math.isfinite(loss) for loss in losses):
        return f"a loss is not finite: {result['losses']}\n{tail}"
    return result


def _verify(
    adapter: Adapter, plan: Plan, column: str, steps: int, scratch: Path
) -> tuple[bool, str]:
    """`amplint verify` on the adapted original: whether it passed, and the
    loss gap it measured or why it failed."""
    if steps < 2:
        return False, f"the original made {steps} step; verify needs 2"
    steps = min(steps, adapter.steps)  # verify fails a run that ends before --steps
    into = scratch / adapter.name / f"verify-{column}"
    script = _workspace(adapter, plan.tree, plan.programs["original"], into)
    options = REWRITES[column]
    command = [sys.executable, "-m", "amplint", "verify", str(script), "--json"]
    command += ["--device-type", options["device_type"], "--dtype", options["dtype"]]
    command += ["--steps", str(steps), "--timeout", str(TIMEOUT_S / 2)]
    for module in adapter.rewrite:
        command += ["--rewrite", str(into / module)]
    if adapter.rtol is not None:
        command += ["--rtol", str(adapter.rtol)]
    command += ["--", *adapter.argv]
    status, stdout, stderr = _run(command, script.parent, _environment(adapter))
    if status is None:
        return False, f"no end within {TIMEOUT_S:g} s\n{_tail(stderr)}"
    try:
        report = json.loads(stdout)
    except ValueError:
        return False, f"exit status {status}, no report\n{_tail(stdout + stderr)}"
    if status == 0:
        return True, f"ok (gap {report['loss_gap']:.1%})"
    problems = report.get("problems") or [report.get("error", "")]
    return False, f"exit status {status}: " + "\n".join(problems)


# What an exported tree's run needs, beside the tree (tests/verify_table.py reads it).
RUN_FILE = "amplint-run.json"


def export(clones: Path, names: list[str], into: Path) -> list[str]:
    """The named adapters' adapted originals as trees that a machine without
    the clones can verify (`make verify-gpu` on a lent GPU): `into/NAME/` holds
    the exported repository with the adapted script and the adapter's files,
    and RUN_FILE the script's path in it, its arguments, its environment, its
    steps and the modules to verify with --rewrite.  The problems (a missing
    clone, an adapter that no longer fits) are returned, one line each."""
    adapters = {adapter.name: adapter for adapter in load_adapters()}
    if unknown := set(names) - adapters.keys():
        raise AdapterError(f"no adapter named {', '.join(sorted(unknown))}")
    corpus, problems = _corpus(), []
    with tempfile.TemporaryDirectory(prefix="amplint-export-") as scratch:
        for name in names:
            adapter = adapters[name]
            plan = prepare(adapter, clones, corpus[adapter.repo]["commit"], Path(scratch))
            if plan.row.skipped or "original" not in plan.programs:
                problems.append(f"{name}: {plan.row.skipped or plan.row.failures[0]}")
                continue
            target = into / name
            shutil.rmtree(target, ignore_errors=True)
            _workspace(adapter, plan.tree, plan.programs["original"], target)
            run = {
                "script": adapter.path,
                "argv": list(adapter.argv),
                "env": dict(adapter.env),
                "steps": adapter.steps,
                "rewrite": list(adapter.rewrite),
                "repo": adapter.repo,
                "commit": corpus[adapter.repo]["commit"],
            }
            (target / RUN_FILE).write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    return problems


def run_subset(
    clones: Path, only: list[str] | None = None, jobs: int = 1, scratch: Path | None = None
) -> list[Row]:
    """A row for each adapter (those named in `only`, when given), in name order."""
    adapters = load_adapters()
    if only:
        if unknown := set(only) - {adapter.name for adapter in adapters}:
            raise AdapterError(f"no adapter named {', '.join(sorted(unknown))}")
        adapters = [adapter for adapter in adapters if adapter.name in only]
    corpus = _corpus()
    with tempfile.TemporaryDirectory(prefix="amplint-runnable-") as temporary:
        directory = scratch or Path(temporary)
        plans = [
            prepare(adapter, clones, corpus[adapter.repo]["commit"], directory)
            for adapter in adapters
        ]
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            running = [
                pool.submit(execute, plan, directory) for plan in plans if not plan.row.skipped
            ]
            for future in as_completed(running):
                row = future.result()
                print(
                    f"{row.name}: {'passed' if row.passed else 'FAILED'} ({row.seconds:.0f} s)",
                    flush=True,
                )
    return [plan.row for plan in plans]


def print_table(rows: list[Row]) -> None:
    print("| script | " + " | ".join(COLUMNS) + " | s |")
    print("|---" * (len(COLUMNS) + 1) + "|---:|")
    for row in rows:
        if row.skipped:
            print(f"| {row.name} | skipped: {row.skipped} |")
            continue
        cells = " | ".join(row.cells.get(column, "-") for column in COLUMNS)
        print(f"| {row.name} | {cells} | {row.seconds:.0f} |")
    for row in rows:
        for failure in row.failures:
            print(f"\n{row.name}: FAIL {failure}")
    ran = [row for row in rows if not row.skipped]
    skipped = len(rows) - len(ran)
    print(
        f"\nrunnable subset: {sum(row.passed for row in ran)} of {len(ran)} passed"
        + (f" ({skipped} skipped)" if skipped else "")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clones", type=Path, default=default_clones())
    parser.add_argument("--only", action="append", help="only this adapter (repeatable)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--keep", type=Path, help="work in this directory and leave it")
    parser.add_argument(
        "--export",
        type=Path,
        metavar="DIR",
        help="write the --only adapters' adapted trees to DIR for verify elsewhere; run nothing",
    )
    options = parser.parse_args(argv)
    if options.export is not None:
        if not options.only:
            parser.error("--export needs --only NAME for each tree to export")
        try:
            problems = export(options.clones, options.only, options.export)
        except AdapterError as error:
            parser.error(str(error))
        for problem in problems:
            print(f"not exported: {problem}", file=sys.stderr)
        print(
            f"exported {len(options.only) - len(problems)} of {len(options.only)} to {options.export}"
        )
        return 1 if problems else 0
    if options.keep is not None:
        if options.keep.exists() and any(options.keep.iterdir()):
            parser.error(f"--keep {options.keep}: not empty")
        options.keep.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        rows = run_subset(options.clones, options.only, options.jobs, options.keep)
    except AdapterError as error:
        parser.error(str(error))
    print_table(rows)
    print(f"({time.monotonic() - started:.0f} s)")
    return 0 if all(row.passed for row in rows if not row.skipped) else 1


if __name__ == "__main__":
    sys.exit(main())
