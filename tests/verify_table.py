"""Run `amplint verify` on the bundled GPU examples and print the README table.

    python tests/verify_table.py [--steps 40] [--repeat 3] [--out DIR] [VERIFY OPTIONS...]
    make verify-gpu

On a CUDA GPU each example runs in FP32, in FP32 with TF32 matmuls, and as
amplint rewrites it (float16 autocast + GradScaler by default), 40 steps each,
timed after 10, in 3 interleaved rounds: the table gives each median step time
with the spread (IQR) of the rounds' medians.  On a machine without CUDA it
says so in one line and makes a dry run of the same code path on the CPU (small
sizes, `--device-type cpu --dtype bfloat16`, 10 steps, 2 rounds), exiting 0
when that passes: the suite runs it so.  A float16 overflow only the data shows
(`overflows_fp16.py`) is the row verify must fail, on the GPU and on the CPU
(in float16 there too).  Extra options go to `amplint verify`;
`--small` picks the CPU sizes.  The table and each example's JSON are written
to `--out` (default build/verify-gpu), each JSON as soon as its example is done.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

from amplint.verify.report import environment_line

EXAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "verify"
# script -> its arguments at full size (the defaults) and for a CPU try-out
RUNS = {
    "resnet_style.py": ((), ("--batch-size", "8", "--image-size", "32", "--width", "8")),
    "gpt_style.py": (
        (),
        ("--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", "32", "--vocab", "256"),
    ),
    "overflows_fp16.py": ((), ()),
}
# Scripts verify must fail, with the options that show why: a float16
# overflow only the data shows (amplint rewrites it; float16 on a CPU dry run too).
MUST_FAIL = {"overflows_fp16.py": ("--dtype", "float16")}
# script -> what verify needs for its throughput, at full size and small: the
# batch (images), or the batch and sequence length (tokens).
THROUGHPUT = {
    "resnet_style.py": (("--batch-size", "128"), ("--batch-size", "8")),
    "gpt_style.py": (
        ("--batch-size", "16", "--seq-len", "1024"),
        ("--batch-size", "16", "--seq-len", "32"),
    ),
    "overflows_fp16.py": ((), ()),
}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of timing runs")
    parser.add_argument("--small", action="store_true", help="CPU-sized models")
    parser.add_argument("--out", type=Path, default=Path("build") / "verify-gpu")
    options, verify_options = parser.parse_known_args(argv)
    if not _cuda_available():
        print("no CUDA device here: a dry run of the same code path on the CPU, not figures")
        options.small, options.steps, options.repeat = True, 10, 2
        verify_options = ["--device-type", "cpu", "--dtype", "bfloat16", *verify_options]
    rows, documents = [], {}
    options.out.mkdir(parents=True, exist_ok=True)
    plots = importlib.util.find_spec("matplotlib") is not None
    for script, (full_size, small) in RUNS.items():
        command = [sys.executable, "-m", "amplint", "verify", str(EXAMPLES / script)]
        command += ["--steps", str(options.steps), "--repeat", str(options.repeat)]
        command += ["--json", *verify_options, *MUST_FAIL.get(script, ())]
        command += THROUGHPUT[script][1 if options.small else 0]
        if plots:
            command += ["--plot", str(options.out / f"{Path(script).stem}.png")]
        command += ["--", *(small if options.small else full_size)]
        result = subprocess.run(command, capture_output=True, text=True)
        try:
            document = json.loads(result.stdout)
        except ValueError:
            print(result.stderr, file=sys.stderr)
            return result.returncode or 2
        if "error" in document:  # not a verdict: the run could not be made
            print(f"{script}: {document['error']}", file=sys.stderr)
            return document["exit_code"]
        documents[script] = document
        # Written now: a run cut short still leaves the examples it finished.
        (options.out / f"{Path(script).stem}.json").write_text(
            json.dumps(document, indent=2), encoding="utf-8"
        )
        base, amp, tf32 = document["baseline"], document["amp"], document["tf32"]
        spread = document["repeats"] or {}
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
        if script in MUST_FAIL:
            verdict += " (must fail)" if not document["passed"] else " (must fail: WRONG)"
        rows.append(
            f"| `{script}` | {document['dtype']} | {_step_ms(base, spread.get('baseline'))} | "
            f"{tf32_cells} | {_step_ms(amp, spread.get('AMP'))} | "
            f"**{document['speedup']:.2f}x** | {rate} | {peak} | {gap} | "
            f"{amp['skipped_steps']} | {verdict} |"
        )
    first = next(iter(documents.values()))
    settings = first["settings"]
    environment = first["baseline"].get("environment") or {}
    device = environment_line(environment) if "gpu" in environment else first["device"]
    print(
        f"device: {device}; torch {first['torch']}; FP32 baseline with "
        f"TF32 matmul {'on' if settings['matmul_allow_tf32'] else 'off'} "
        f"(precision {settings['matmul_precision']}), "
        f"cuDNN TF32 {'on' if settings['cudnn_allow_tf32'] else 'off'}; the TF32 run sets "
        'torch.set_float32_matmul_precision("high") and cuDNN TF32; '
        f"{first['steps']} steps, timed after {first['warmup']}\n"
    )
    table = [
        "| script | AMP dtype | FP32 step ms | FP32+TF32 step ms | TF32 speedup | AMP step ms "
        "| AMP speedup | throughput | peak memory | loss gap | skipped | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|---|",
        *rows,
    ]
    notes = [
        f"- `{script}`: {note}"
        for script, document in documents.items()
        for note in document["notes"] + document["problems"]
    ]
    print("\n".join(table + [""] + notes))
    (options.out / "table.md").write_text("\n".join(table + [""] + notes) + "\n", encoding="utf-8")
    print(f"table, JSON{' and plots' if plots else ''} in {options.out}")
    expected = all(
        document["passed"] is (script not in MUST_FAIL) for script, document in documents.items()
    )
    return 0 if expected else 1


if __name__ == "__main__":
    sys.exit(main())
