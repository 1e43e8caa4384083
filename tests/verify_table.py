"""Run `amplint verify` on the bundled GPU examples and print the README table.

    python tests/verify_table.py [--steps 50] [--out DIR] [VERIFY OPTIONS...]
    make verify-gpu

On a CUDA GPU each example runs in FP32, in FP32 with TF32 matmuls, and as
amplint rewrites it (float16 autocast + GradScaler by default), 50 steps each,
timed after 10.  On a machine without CUDA it says so in one line and makes a
dry run of the same code path on the CPU (small sizes, `--device-type cpu
--dtype bfloat16`, 10 steps), exiting 0 when that passes: the suite runs it so.
Extra options go to `amplint verify`; `--small` picks the CPU sizes.  The table
and each example's JSON are written to `--out` (default build/verify-gpu).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
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
}
# script -> what verify needs for its throughput, at full size and small: the
# batch (images), or the batch and sequence length (tokens).
THROUGHPUT = {
    "resnet_style.py": (("--batch-size", "128"), ("--batch-size", "8")),
    "gpt_style.py": (
        ("--batch-size", "16", "--seq-len", "1024"),
        ("--batch-size", "16", "--seq-len", "32"),
    ),
}


def _cuda_available() -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
    )
    return probe.stdout.strip() == "True"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--small", action="store_true", help="CPU-sized models")
    parser.add_argument("--out", type=Path, default=Path("build") / "verify-gpu")
    options, verify_options = parser.parse_known_args(argv)
    if not _cuda_available():
        print("no CUDA device here: a dry run of the same code path on the CPU, not figures")
        options.small, options.steps = True, 10
        verify_options = ["--device-type", "cpu", "--dtype", "bfloat16", *verify_options]
    rows, documents = [], {}
    options.out.mkdir(parents=True, exist_ok=True)
    plots = importlib.util.find_spec("matplotlib") is not None
    for script, (full_size, small) in RUNS.items():
        command = [sys.executable, "-m", "amplint", "verify", str(EXAMPLES / script)]
        command += ["--steps", str(options.steps), "--json", *verify_options]
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
        if "error" in document:
            print(f"{script}: {document['error']}", file=sys.stderr)
            return document["exit_code"]
        documents[script] = document
        base, amp, tf32 = document["baseline"], document["amp"], document["tf32"]
        peak = (
            "-"
            if document["mem_ratio"] is None
            else f"{base['peak_mem_bytes'] / 2**30:.2f} -> {amp['peak_mem_bytes'] / 2**30:.2f} GiB"
        )
        tf32_cells = (
            f"{tf32['median_step_s'] * 1000:.1f} | {document['tf32_speedup']:.2f}x"
            if tf32
            else "- | -"
        )
        unit = document["throughput_unit"]
        rate = f"{base['throughput']:,.0f} -> {amp['throughput']:,.0f} {unit}"
        rows.append(
            f"| `{script}` | {document['dtype']} | {base['median_step_s'] * 1000:.1f} | "
            f"{tf32_cells} | {amp['median_step_s'] * 1000:.1f} | "
            f"**{document['speedup']:.2f}x** | {rate} | {peak} | {document['loss_gap']:.2%} | "
            f"{amp['skipped_steps']} | {'passed' if document['passed'] else 'failed'} |"
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
    print("\n".join(table))
    (options.out / "table.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    for script, document in documents.items():
        (options.out / f"{Path(script).stem}.json").write_text(
            json.dumps(document, indent=2), encoding="utf-8"
        )
    print(f"table, JSON{' and plots' if plots else ''} in {options.out}")
    return 0 if all(document["passed"] for document in documents.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
