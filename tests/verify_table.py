"""Run `amplint verify` on the bundled GPU examples and print the README table.

    python tests/verify_table.py [--steps 50] [VERIFY OPTIONS...]   (or: make verify-gpu)

Needs a CUDA GPU: each example runs in FP32, in FP32 with TF32 matmuls, and as
amplint rewrites it (float16 autocast + GradScaler by default), 50 steps each,
timed after 10.
Extra options go to `amplint verify` (`--dtype bfloat16`, `--device-type cpu`
with small sizes to try the script itself on a CPU: `--small`).  Not a test:
it prints figures and the JSON it read them from.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "verify"
# script -> its arguments at full size (the defaults) and for a CPU try-out
RUNS = {
    "resnet_style.py": ((), ("--batch-size", "8", "--image-size", "32", "--width", "8")),
    "gpt_style.py": (
        (),
        ("--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", "32", "--vocab", "256"),
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--small", action="store_true", help="CPU-sized models")
    options, verify_options = parser.parse_known_args()
    rows, documents = [], {}
    for script, (full_size, small) in RUNS.items():
        command = [sys.executable, "-m", "amplint", "verify", str(EXAMPLES / script)]
        command += ["--steps", str(options.steps), "--json", *verify_options, "--"]
        command += small if options.small else full_size
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
        rows.append(
            f"| `{script}` | {document['dtype']} | {base['median_step_s'] * 1000:.1f} | "
            f"{tf32_cells} | {amp['median_step_s'] * 1000:.1f} | "
            f"**{document['speedup']:.2f}x** | {peak} | {document['loss_gap']:.2%} | "
            f"{amp['skipped_steps']} | {'passed' if document['passed'] else 'failed'} |"
        )
    first = next(iter(documents.values()))
    settings = first["settings"]
    print(
        f"device: {first['device']}; torch {first['torch']}; FP32 baseline with "
        f"TF32 matmul {'on' if settings['matmul_allow_tf32'] else 'off'} "
        f"(precision {settings['matmul_precision']}), "
        f"cuDNN TF32 {'on' if settings['cudnn_allow_tf32'] else 'off'}; the TF32 run sets "
        'torch.set_float32_matmul_precision("high") and cuDNN TF32; '
        f"{first['steps']} steps, timed after {first['warmup']}\n"
    )
    print(
        "| script | AMP dtype | FP32 step ms | FP32+TF32 step ms | TF32 speedup | AMP step ms "
        "| AMP speedup | peak memory | loss gap | skipped | verdict |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|")
    print("\n".join(rows))
    print("\n" + json.dumps(documents, indent=2), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
