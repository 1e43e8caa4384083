"""Run `amplint verify` on the GPU check's scripts and print the table of docs/verify.md.

    python tests/verify_table.py [--steps 40] [--repeat 3] [--out DIR] [--corpus DIR]
                                 [VERIFY OPTIONS...]
    make verify-gpu

The scripts: the bundled examples (a ResNet, a GPT); a float16 overflow only
the data shows (`overflows_fp16.py`), the row verify must fail; a GAN whose
sigmoid feeds BCELoss (`precision/gan_bce.py`), the row amplint must decline
in float16, verify saying why; and with `--corpus`, CORPUS_ROWS: scripts of
the runnable corpus (a CNN, a transformer, two GANs), from the trees `make
verify-gpu-corpus` exports where the clones are (build/verify-gpu-corpus,
carried to the GPU machine: it has no clones).

On a CUDA GPU each runs in FP32, in FP32 with TF32 matmuls, and as amplint
rewrites it (float16 autocast + GradScaler by default), 40 steps each (fewer
where the script makes fewer), the first fifth (at most 10) untimed, in 3
interleaved rounds: the table gives each median step time with the spread
(IQR) of the rounds' medians.  On a machine without CUDA it says so in one
line and makes a dry run of the same code path on the CPU (small sizes,
`--device-type cpu --dtype bfloat16`, 10 steps, 2 rounds; the must-fail and
must-decline rows in float16 there too).  It exits 0 when every row is as
expected: the suite runs it so.  Extra options go to `amplint verify`;
`--small` picks the CPU sizes.  The table and each row's JSON are written to
`--out` (default build/verify-gpu), each JSON as soon as its row is done.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from amplint.verify.report import environment_line

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = REPO_ROOT / "fixtures" / "verify"
STUBS = REPO_ROOT / "tests" / "ecosystem" / "runnable" / "stubs"
RUN_FILE = "amplint-run.json"  # tests/ecosystem_runnable.py's, beside an exported tree
# The runnable corpus's GPU-worthy scripts (tests/ecosystem/runnable/), with
# the dtype each row asks for (None: verify's default, float16 on CUDA) and
# what verify must answer: a CNN, a transformer (a trainer package's step, with
# --rewrite), a GAN amplint rewrites, and a GAN with a sigmoid head, which it
# must decline in float16 (the float16 rewrite it used to write collapsed on an
# H200) and may rewrite in bfloat16.
CORPUS_ROWS = (
    ("yunjey_resnet", None, "pass"),
    ("mingpt_chargpt", None, "pass"),
    ("gan_began", None, "pass"),
    ("examples_dcgan", "float16", "decline"),
    ("examples_dcgan", "bfloat16", "pass"),
)


@dataclass(frozen=True)
class Example:
    """One row: a script, what verify is asked, and what it must answer."""

    label: str
    script: Path
    script_args: tuple[str, ...] = ()
    verify_args: tuple[str, ...] = ()  # the throughput's sizes, a dtype, --rewrite
    expect: str = "pass"  # or "fail" (it did not train), "decline" (amplint must not rewrite it)
    steps: int | None = None  # the most the script makes; the table's --steps otherwise
    env: dict[str, str] = field(default_factory=dict)
    corpus: bool = False  # a script of the runnable corpus, exported


def bundled(small: bool) -> list[Example]:
    """The bundled examples, at full size or the CPU's: a ResNet and a GPT;
    a float16 overflow only the data shows (amplint rewrites it; verify must
    fail it, in float16 on a CPU dry run too); a GAN whose sigmoid feeds
    BCELoss, which amplint must decline in float16."""
    resnet = ("--batch-size", "8", "--image-size", "32", "--width", "8")
    gpt = ("--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", "32", "--vocab", "256")
    return [
        Example(
            "resnet_style.py",
            EXAMPLES / "resnet_style.py",
            resnet if small else (),
            ("--batch-size", "8" if small else "128"),
        ),
        Example(
            "gpt_style.py",
            EXAMPLES / "gpt_style.py",
            gpt if small else (),
            ("--batch-size", "16", "--seq-len", "32" if small else "1024"),
        ),
        Example(
            "overflows_fp16.py", EXAMPLES / "overflows_fp16.py", (), ("--dtype", "float16"), "fail"
        ),
        Example(
            "precision/gan_bce.py",
            REPO_ROOT / "fixtures" / "precision" / "gan_bce.py",
            (),
            ("--dtype", "float16"),
            "decline",
            steps=20,
        ),
    ]


def exported(corpus: Path) -> tuple[list[Example], list[str]]:
    """The rows of CORPUS_ROWS whose tree `python -m tests.ecosystem_runnable
    --export` wrote under `corpus`, and the names of those it did not."""
    examples, missing = [], []
    for name, dtype, expect in CORPUS_ROWS:
        try:
            run = json.loads((corpus / name / RUN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            missing.append(name)
            continue
        tree = corpus / name
        verify_args = ("--dtype", dtype) if dtype else ()
        for module in run["rewrite"]:
            verify_args += ("--rewrite", str(tree / module))
        examples.append(
            Example(
                f"{name} ({run['repo']}@{run['commit'][:7]})" + (f" {dtype}" if dtype else ""),
                tree / run["script"],
                tuple(run["argv"]),
                verify_args,
                expect,
                steps=run["steps"],
                env=run["env"],
                corpus=True,
            )
        )
    return examples, missing


def _cuda_available() -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
    )
    return probe.stdout.strip() == "True"


def _step_ms(run: dict, round_medians: list[float] | None) -> str:
    """A run's median step time in ms, with the IQR of the rounds' medians
    when there were several rounds."""
    cell = f"{run['median_step_s'] * 1000:.1f}"
    if round_medians and len(round_medians) > 1:
        low, _, high = statistics.quantiles(round_medians, n=4, method="inclusive")
        cell += f" (IQR {(high - low) * 1000:.1f})"
    return cell


def _environment(example: Example) -> dict[str, str]:
    """The script's environment: amplint and the data stubs importable from
    anywhere, with an exported script's own PYTHONPATH (relative to its
    directory, where it runs) first."""
    env = dict(os.environ)
    own = [
        str((example.script.parent / entry).resolve())
        for entry in example.env.get("PYTHONPATH", "").split(os.pathsep)
        if entry
    ]
    env.update({key: value for key, value in example.env.items() if key != "PYTHONPATH"})
    # The stubs stand in for torchvision and matplotlib, which the corpus's
    # scripts import: for them alone (verify's --plot needs the real one).
    stubs = [str(STUBS)] if example.corpus else []
    paths = [*own, *stubs, str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    return env


def _row(example: Example, document: dict, spread: dict) -> str:
    base, amp, tf32 = document["baseline"], document["amp"], document["tf32"]
    peak = (
        "-"
        if document["mem_ratio"] is None
        else f"{base['peak_mem_bytes'] / 2**30:.2f} -> {amp['peak_mem_bytes'] / 2**30:.2f} GiB"
    )
    tf32_cells = (
        f"{_step_ms(tf32, spread.get('TF32'))} | {document['tf32_speedup']:.2f}x"
        if tf32
        else "- | -"
    )
    unit = document["throughput_unit"]
    rate = (
        f"{base['throughput']:,.0f} -> {amp['throughput']:,.0f} {unit}"
        if base["throughput"] and amp["throughput"]
        else "-"
    )
    gap = "-" if document["loss_gap"] is None else f"{document['loss_gap']:.2%}"
    verdict = "passed" if document["passed"] else "failed"
    if example.expect == "fail":
        verdict += " (must fail)" if not document["passed"] else " (must fail: WRONG)"
    elif example.expect == "decline":
        verdict += " (must decline: WRONG)"
    return (
        f"| `{example.label}` | {document['dtype']} | {_step_ms(base, spread.get('baseline'))} | "
        f"{tf32_cells} | {_step_ms(amp, spread.get('AMP'))} | "
        f"**{document['speedup']:.2f}x** | {rate} | {peak} | {gap} | "
        f"{amp['skipped_steps']} | {verdict} |"
    )


def _as_expected(example: Example, document: dict) -> bool:
    if "error" in document:
        return (
            example.expect == "decline"
            and document["exit_code"] == 3
            and "declines to rewrite" in document["error"]
        )
    return document["passed"] is (example.expect == "pass")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of timing runs")
    parser.add_argument("--small", action="store_true", help="CPU-sized models")
    parser.add_argument("--out", type=Path, default=Path("build") / "verify-gpu")
    parser.add_argument(
        "--corpus",
        type=Path,
        metavar="DIR",
        help="trees of the runnable corpus exported here (make verify-gpu-corpus): their rows too",
    )
    options, verify_options = parser.parse_known_args(argv)
    options.out = options.out.resolve()  # each script runs in its own directory
    if not _cuda_available():
        print("no CUDA device here: a dry run of the same code path on the CPU, not figures")
        options.small, options.steps, options.repeat = True, 10, 1
        verify_options = ["--device-type", "cpu", "--dtype", "bfloat16", *verify_options]
    examples, missing = bundled(options.small), []
    if options.corpus is not None:
        corpus, missing = exported(options.corpus.resolve())
        examples += corpus
    rows, notes, unexpected = [], [], []
    documents: list[tuple[Example, dict]] = []
    options.out.mkdir(parents=True, exist_ok=True)
    plots = importlib.util.find_spec("matplotlib") is not None
    for number, example in enumerate(examples, 1):
        steps = min(options.steps, example.steps or options.steps)
        command = [sys.executable, "-m", "amplint", "verify", str(example.script)]
        command += ["--steps", str(steps), "--repeat", str(options.repeat), "--json"]
        command += [*verify_options, *example.verify_args]
        stem = f"{number:02d}-{example.script.stem}"
        if plots and not example.corpus:
            command += ["--plot", str(options.out / f"{stem}.png")]
        command += ["--", *example.script_args]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            cwd=example.script.parent,
            env=_environment(example),
        )
        try:
            document = json.loads(result.stdout)
        except ValueError:  # verify itself broke: its error, and the other rows go on
            document = {"error": result.stderr.strip()[-2000:], "exit_code": result.returncode}
        # Written now: a run cut short still leaves the rows it finished.
        (options.out / f"{stem}.json").write_text(json.dumps(document, indent=2), encoding="utf-8")
        if not _as_expected(example, document):
            unexpected.append(example.label)
        if "error" in document:
            verdict = (
                "declined (must decline)"
                if _as_expected(example, document)
                else f"error, exit {document['exit_code']}"
                + (" (must decline: WRONG)" if example.expect == "decline" else "")
            )
            dtype = dict(zip(command, command[1:])).get("--dtype", "-")
            rows.append(f"| `{example.label}` | {dtype} |" + " - |" * 9 + f" {verdict} |")
            notes.append(f"- `{example.label}`: {document['error']}")
            continue
        documents.append((example, document))
        rows.append(_row(example, document, document["repeats"] or {}))
        notes += [
            f"- `{example.label}`: {note}" for note in document["notes"] + document["problems"]
        ]
    if documents:
        first = documents[0][1]
        settings = first["settings"]
        environment = first["baseline"].get("environment") or {}
        device = environment_line(environment) if "gpu" in environment else first["device"]
        print(
            f"device: {device}; torch {first['torch']}; FP32 baseline with "
            f"TF32 matmul {'on' if settings['matmul_allow_tf32'] else 'off'} "
            f"(precision {settings['matmul_precision']}), "
            f"cuDNN TF32 {'on' if settings['cudnn_allow_tf32'] else 'off'}; the TF32 run sets "
            'torch.set_float32_matmul_precision("high") and cuDNN TF32; '
            f"at most {options.steps} steps, the first fifth (at most 10) untimed\n"
        )
    table = [
        "| script | AMP dtype | FP32 step ms | FP32+TF32 step ms | TF32 speedup | AMP step ms "
        "| AMP speedup | throughput | peak memory | loss gap | skipped | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|---|",
        *rows,
    ]
    notes += [f"- `{name}`: not exported under {options.corpus}" for name in missing]
    print("\n".join(table + [""] + notes))
    (options.out / "table.md").write_text("\n".join(table + [""] + notes) + "\n", encoding="utf-8")
    print(f"table, JSON{' and plots' if plots else ''} in {options.out}")
    if unexpected or missing:
        print(f"not as expected: {', '.join(unexpected + missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
