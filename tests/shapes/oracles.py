"""Holds amplint's `check` and `fix` of generated programs to every oracle.

For each program and each of SETTINGS (fix's defaults; the CPU with float16,
where torch's GradScaler really scales, unscales and skips; the CPU with
bfloat16), the static oracles:

- no traceback, no internal error;
- every FP32 step owes a finding: a rewrite, or a decline that says why;
- a deliberate FP32 twin of an AMP step is left alone;
- a step whose precision the program sets itself is declined in every dtype,
  one with a float16 hazard in float16, each with a reason ("not rewritten"),
  and a bfloat16 model is never called FP32;
- the rewrite parses, a second fix changes nothing, and it has no finding of
  ours and no undefined, unused or possibly unbound name that the original
  did not have;
- a notebook beside the script that imports its functions still calls them
  with arguments that bind to their rewritten signatures;

then every program runs (tests/shapes/execute.py): the original, a
calibration run of it with another seed, and each rewrite.  The original must
run (else the grammar is wrong); each rewrite must run; the default rewrite,
whose CUDA autocast and GradScaler are disabled on this CPU, must train
exactly as the original did; a CPU rewrite must train under autocast and hold
loss parity and update parity (amplint.verify.compare) with the original.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from amplint import project as project_model
from amplint.config import Settings
from amplint.engine import analyse_source
from amplint.files import source_from_bytes
from amplint.rules import ALL_CODES
from amplint.selfcheck import name_problems, new_findings, new_name_problems
from amplint.verify.compare import Comparison, Thresholds, active_autocast
from tests.shapes.grammar import Program

CODES = frozenset(ALL_CODES)
SETTINGS: dict[str, Settings] = {
    "default": Settings(),
    "cpu-float16": Settings(device_type="cpu", dtype="float16"),
    "cpu-bfloat16": Settings(device_type="cpu", dtype="bfloat16"),
}
# `--dtype auto`: CUDA autocast in the dtype the GPU suits (bfloat16 from
# compute capability 8.0, float16 with a GradScaler before), so it must decline
# what float16 cannot carry.  Its rewrite runs on this CPU as the default's does
# (CUDA autocast off): judged on request (`python -m tests.shapes --with-auto`),
# to compare what it writes with the default.
AUTO = {"auto": Settings(dtype="auto")}
# A generated program takes at most a few dozen steps: the cap only guards a
# rewrite that loops.
STEP_LIMIT = 200
THRESHOLDS = Thresholds(steps=STEP_LIMIT, warmup=1, last=3, rtol=0.05, min_speedup=None)
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Failure:
    oracle: str  # a short name: "traceback", "silent FP32 step", "update parity", ...
    settings: str  # a key of SETTINGS, or "original"
    detail: str

    def __str__(self) -> str:
        return f"{self.oracle} [{self.settings}]: {self.detail}"


@dataclass
class Judged:
    """What the oracles said of one program."""

    program: Program
    failures: list[Failure] = field(default_factory=list)
    findings: int = 0  # findings of `check`, over the settings
    rewritten: set[str] = field(default_factory=set)  # settings under which fix changed it
    declined: Counter[str] = field(default_factory=Counter)  # AMP001 findings without a fix

    @property
    def rewrites(self) -> int:
        return len(self.rewritten)

    @property
    def declines(self) -> int:
        return sum(self.declined.values())

    def failed_in(self, settings: str) -> bool:
        return any(failure.settings == settings for failure in self.failures)


@dataclass
class _Rewrite:
    settings: str
    code: str  # the rewritten code that runs (a notebook's cells joined)
    adds_amp: bool  # the rewrite trains under autocast where the original did not


IMPORTER = "explore.ipynb"  # a notebook beside the script that imports from it


def _name(program: Program) -> str:
    return "train.ipynb" if program.cells is not None else "train.py"


def _file_text(program: Program) -> str:
    return program.notebook_json() if program.cells is not None else program.text


def _runnable(program: Program, fixed_text: str) -> str:
    """The code a rewrite runs: a notebook's code cells in order."""
    if program.cells is None:
        return fixed_text
    cells = json.loads(fixed_text)["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")


def _positions(program: Program, statement: str) -> set[tuple[int | None, int]]:
    """(cell, line) of each line holding `statement` (cell None in a script)."""
    if program.cells is None:
        texts = [(None, program.text)]
    else:
        texts = [(number, cell) for number, cell in enumerate(program.cells, 1)]
    found = set()
    for cell, text in texts:
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip() == statement:
                found.add((cell, number))
    return found


def judge_statically(
    program: Program, directory: Path, settings_by_key: dict[str, Settings] = SETTINGS
) -> tuple[Judged, list[_Rewrite]]:
    judged = Judged(program)
    path = directory / _name(program)
    path.write_text(_file_text(program), encoding="utf-8")
    if program.importer_cells is not None:
        importer = directory / IMPORTER
        importer.write_text(program.notebook_json(program.importer_cells), encoding="utf-8")
    source = source_from_bytes(path, path.read_bytes())
    rewrites = []
    for key, settings in settings_by_key.items():
        try:
            rewrite = _judge_settings(judged, program, source, key, settings)
        except Exception:  # noqa: BLE001 - a traceback is the finding
            judged.failures.append(Failure("traceback", key, traceback.format_exc(limit=-6)))
            continue
        if rewrite is not None:
            rewrites.append(rewrite)
    project_model.forget_projects()  # one project per program: never reused
    return judged, rewrites


def _judge_settings(judged, program, source, key, settings) -> _Rewrite | None:
    settings = Settings(**{**settings.__dict__, "root": source.path.parent})
    report = analyse_source(source, CODES, settings, fixing=True)
    if report.error is not None:
        judged.failures.append(Failure("internal error", key, report.error))
        return None
    found = report.found or []
    judged.findings += len(found)
    judged.declined[key] += sum(1 for d in found if d.code == "AMP001" and d.fix is None)
    at = {(d.span.cell, d.span.line) for d in found}
    for backwards in program.fp32_backwards:
        places = set().union(*(_positions(program, statement) for statement in backwards))
        if not places & at:
            judged.failures.append(
                Failure("silent FP32 step", key, f"no finding on `{backwards[0]}`")
            )
    for backward in program.twin_backwards:
        if _positions(program, backward) & {
            (d.span.cell, d.span.line) for d in found if d.code == "AMP001"
        }:
            judged.failures.append(
                Failure("FP32 twin reported", key, f"AMP001 on the deliberate `{backward}`")
            )
    _judge_declines(judged, program, key, settings, found, report.applied)
    if report.fixed_text is None:
        return None
    judged.rewritten.add(key)
    code = _runnable(program, report.fixed_text)
    original_code = _runnable(program, source.text)
    try:
        ast.parse(code)
    except SyntaxError as error:
        judged.failures.append(Failure("does not parse", key, str(error)))
        return None
    if program.importer_cells is not None:
        for problem in _unbound_calls(code, "\n".join(program.importer_cells)):
            judged.failures.append(Failure("importer broken", key, problem))
    if program.twin_backwards:
        twin = _function_text(original_code, "train_fp32")
        if twin is not None and twin != _function_text(code, "train_fp32"):
            judged.failures.append(
                Failure("FP32 twin rewritten", key, "the function `train_fp32` changed")
            )
    again_source = source_from_bytes(source.path, report.fixed_text.encode("utf-8"))
    again = analyse_source(again_source, CODES, settings, fixing=True)
    if again.fixed_text is not None or again.error is not None:
        judged.failures.append(
            Failure("second fix", key, again.error or "a second fix changed the text")
        )
    extra = new_findings(found, again.found or [])
    if extra:
        shown = "; ".join(f"{d.code} {d.message}" for d in extra)
        judged.failures.append(Failure("new finding", key, shown))
    names = new_name_problems(name_problems(original_code), code)
    if names:
        judged.failures.append(Failure("names", key, "; ".join(names)))
    # AMP001's rewrite, or a migration (apex's O1 to torch.amp), enters autocast.
    adds_amp = code.count("autocast(") > original_code.count("autocast(")
    return _Rewrite(key, code, adds_amp)


def _judge_declines(judged, program, key, settings, found, applied) -> None:
    """The precision oracles: what the program's own precision or a float16
    hazard forbids is declined, with the reason, and not rewritten."""
    if settings.dtype not in program.declined_in:
        return
    if any(d.code == "AMP001" for d in applied):
        why = (
            "a step whose precision the program sets"
            if program.shape.managed
            else ("a step with a float16 hazard")
        )
        judged.failures.append(Failure("rewrote a declined step", key, f"AMP001 fixed {why}"))
    at_steps = set().union(
        *(
            _positions(program, statement)
            for backwards in program.fp32_backwards
            for statement in backwards
        )
    )
    for finding in found:
        if finding.code != "AMP001" or (finding.span.cell, finding.span.line) not in at_steps:
            continue
        if "not rewritten" not in finding.message:
            judged.failures.append(
                Failure("decline without a reason", key, finding.message.splitlines()[0])
            )
        if program.shape.bfloat16_model and "FP32" in finding.message:
            judged.failures.append(
                Failure("bfloat16 model called FP32", key, finding.message.splitlines()[0])
            )


def _unbound_calls(module: str, importer: str) -> list[str]:
    """The calls in `importer` (code that imports `module`'s functions by
    name) whose arguments do not bind to those functions' signatures: what
    would raise TypeError there.  Signatures are built from the definitions
    alone (names, kinds and whether a default exists), never run."""
    signatures = {}
    for node in ast.parse(module).body:
        if isinstance(node, ast.FunctionDef):
            stub = ast.FunctionDef(
                name=node.name,
                args=_without_values(node.args),
                body=[ast.Pass()],
                decorator_list=[],
                returns=None,
                type_params=[],
            )
            namespace: dict = {}
            exec(
                compile(ast.fix_missing_locations(ast.Module([stub], [])), "<stub>", "exec"),
                namespace,
            )
            signatures[node.name] = inspect.signature(namespace[node.name])
    problems = []
    for call in ast.walk(ast.parse(_masked_magics(importer))):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            continue
        signature = signatures.get(call.func.id)
        if signature is None:
            continue
        positional = [object() for arg in call.args if not isinstance(arg, ast.Starred)]
        keywords = {k.arg: object() for k in call.keywords if k.arg is not None}
        try:
            signature.bind(*positional, **keywords)
        except TypeError as error:
            problems.append(f"`{ast.unparse(call)}`: {error}")
    return problems


def _without_values(arguments: ast.arguments) -> ast.arguments:
    """`arguments` with each default `None` and no annotation."""

    def bare(arg: ast.arg | None) -> ast.arg | None:
        return None if arg is None else ast.arg(arg.arg)

    return ast.arguments(
        posonlyargs=[bare(a) for a in arguments.posonlyargs],
        args=[bare(a) for a in arguments.args],
        vararg=bare(arguments.vararg),
        kwonlyargs=[bare(a) for a in arguments.kwonlyargs],
        kw_defaults=[None if d is None else ast.Constant(None) for d in arguments.kw_defaults],
        kwarg=bare(arguments.kwarg),
        defaults=[ast.Constant(None) for _ in arguments.defaults],
    )


def _masked_magics(code: str) -> str:
    """A notebook's code with its IPython lines (`%matplotlib`) commented out."""
    return "\n".join(
        "#" + line if line.lstrip().startswith(("%", "!")) else line for line in code.split("\n")
    )


def _function_text(code: str, name: str) -> str | None:
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(code, node)
    return None


def run_batch(jobs: list[dict], timeout_s: float = 600) -> list[dict]:
    """Each job's run (see tests/shapes/execute.py), in one child process."""
    with tempfile.TemporaryDirectory(prefix="amplint-shapes-jobs-") as scratch:
        jobs_path, results_path = Path(scratch) / "jobs.json", Path(scratch) / "results.json"
        jobs_path.write_text(json.dumps(jobs), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(
            [sys.executable, "-m", "tests.shapes.execute", str(jobs_path), str(results_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=timeout_s,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the runner of generated programs failed:\n{done.stderr[-3000:]}")
        return json.loads(results_path.read_text(encoding="utf-8"))


def judge_runs(
    judged: Judged, original: dict, calibration: dict, rewrites: dict[str, tuple[dict, bool]]
) -> None:
    """The execution oracles, from the runs' measurements; `rewrites` holds
    each rewrite's run and whether it adds AMP (else it must train the same)."""
    if original["error"] is not None:
        judged.failures.append(Failure("original crashed", "original", _last_line(original)))
        return
    if original["steps"] == 0:
        judged.failures.append(Failure("original trained nothing", "original", ""))
        return
    for key, (run, adds_amp) in rewrites.items():
        if run["error"] is not None:
            judged.failures.append(Failure("rewrite crashed", key, _last_line(run)))
            continue
        if key in ("default", *AUTO) or not adds_amp:
            # CUDA autocast and GradScaler are disabled on this CPU, or the
            # rewrite only saves a scaler's state: the same training.
            if run["losses"] != original["losses"] or run["updates"] != original["updates"]:
                judged.failures.append(
                    Failure("training changed", key, _first_difference(original, run))
                )
            continue
        if not active_autocast(run):
            judged.failures.append(Failure("AMP inactive", key, "no autocast region was entered"))
        if run["steps"] != original["steps"]:
            judged.failures.append(
                Failure(
                    "steps",
                    key,
                    f"{run['steps']} optimizer steps, the original {original['steps']}",
                )
            )
        if run["steps"] - run["skipped_steps"] <= 0:
            judged.failures.append(Failure("no update", key, "every step was skipped"))
            continue
        comparison = Comparison(
            [original],
            [run],
            THRESHOLDS,
            False,
            calibration=[calibration],
            calibrated_by="the original with another seed",
        )
        for reason in comparison.reasons():
            oracle = "update parity" if reason.startswith("update parity") else "loss parity"
            judged.failures.append(Failure(oracle, key, reason))


def _last_line(run: dict) -> str:
    return run["error"].strip().splitlines()[-1]


def _first_difference(original: dict, run: dict) -> str:
    for step, (a, b) in enumerate(zip(original["losses"], run["losses"])):
        if a != b:
            return f"step {step}: loss {b} where the original had {a}"
    return f"{run['steps']} steps where the original took {original['steps']}, or other updates"


def judge(
    programs: list[Program], workdir: Path, settings_by_key: dict[str, Settings] = SETTINGS
) -> list[Judged]:
    """Every oracle on every program, under each of `settings_by_key`; the runs
    in one child process."""
    verdicts = []
    jobs: list[dict] = []
    plans: list[tuple[Judged, int, int, dict[str, int]]] = []
    for number, program in enumerate(programs):
        directory = workdir / f"program{number}"
        directory.mkdir(parents=True)
        judged, rewrites = judge_statically(program, directory, settings_by_key)
        verdicts.append(judged)

        def job(run: str, code: str, seed: int = 0) -> int:
            run_dir = directory / run
            run_dir.mkdir()
            jobs.append(
                {
                    "source": code,
                    "script": str(run_dir / "train.py"),
                    "seed": seed,
                    "steps": STEP_LIMIT,
                }
            )
            return len(jobs) - 1

        original_code = _runnable(program, _file_text(program))
        original = job("original", original_code)
        calibration = job("calibration", original_code, seed=1)
        runs = {r.settings: (job(r.settings, r.code), r.adds_amp) for r in rewrites}
        plans.append((judged, original, calibration, runs))
    results = run_batch(jobs) if jobs else []
    for judged, original, calibration, rewrites in plans:
        judge_runs(
            judged,
            results[original],
            results[calibration],
            {key: (results[index], adds_amp) for key, (index, adds_amp) in rewrites.items()},
        )
    return verdicts
