"""`make shapes`: generate training scripts, hold amplint to every oracle, shrink
what fails.

    python -m tests.shapes [-n N] [--seed S] [--keep DIR] [--batch B] [--with-auto]

Draws N shapes (tests/shapes/grammar.py) from seed S, judges them in batches
(tests/shapes/oracles.py), and prints how many programs, findings, rewrites
and failures there were, in all and under each settings (`--with-auto` adds
`--dtype auto` on the CPU, to compare it with the default float16).  Each class of failure (its oracle and message, names
left out) is shrunk to the fewest idioms that still fail it; its program goes
to DIR (default build/shapes) as a reproduction.  Exits 1 when a failure is
not one of the open classes in tests/shapes/known.py.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.shapes.grammar import random_shape, render
from tests.shapes.known import unexpected
from amplint.config import Settings
from tests.shapes.oracles import AUTO, SETTINGS, Judged, judge
from tests.shapes.shrink import failure_class, shrink


def judge_shapes(
    count: int, seed: int, batch: int, settings_by_key: dict[str, Settings] = SETTINGS
) -> list[Judged]:
    rng = random.Random(seed)
    shapes = [random_shape(rng) for _ in range(count)]
    verdicts: list[Judged] = []
    for start in range(0, count, batch):
        programs = [render(shape) for shape in shapes[start : start + batch]]
        with tempfile.TemporaryDirectory(prefix="amplint-shapes-") as scratch:
            verdicts += judge(programs, Path(scratch), settings_by_key)
        print(f"  {len(verdicts)} of {count} programs judged", file=sys.stderr)
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.shapes")
    parser.add_argument("-n", type=int, default=300, help="programs to generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=100, help="programs per child process")
    parser.add_argument("--keep", type=Path, default=Path("build/shapes"))
    parser.add_argument(
        "--with-auto", action="store_true", help="also judge `--dtype auto` on the CPU"
    )
    options = parser.parse_args(argv)
    started = time.monotonic()
    settings_by_key = {**SETTINGS, **(AUTO if options.with_auto else {})}
    verdicts = judge_shapes(options.n, options.seed, options.batch, settings_by_key)
    classes: dict[str, Judged] = {}
    per_class: Counter[str] = Counter()
    for judged in verdicts:
        for failure in judged.failures:
            key = failure_class(failure)
            per_class[key] += 1
            classes.setdefault(key, judged)
    print(
        f"{len(verdicts)} programs, {sum(j.findings for j in verdicts)} findings, "
        f"{sum(j.rewrites for j in verdicts)} rewrites, {sum(j.declines for j in verdicts)} "
        f"declines; {sum(1 for j in verdicts if j.failures)} programs failed, "
        f"{len(classes)} classes of failure ({time.monotonic() - started:.0f} s)"
    )
    for key in settings_by_key:
        print(
            f"  {key:>12}: {sum(key in j.rewritten for j in verdicts)} rewrites, "
            f"{sum(j.declined[key] for j in verdicts)} declines, "
            f"{sum(j.failed_in(key) for j in verdicts)} programs failed"
        )
    options.keep.mkdir(parents=True, exist_ok=True)
    surprises = 0
    for number, (key, judged) in enumerate(sorted(classes.items()), 1):
        small = shrink(judged.program.shape, key)
        new = unexpected(key, small)
        surprises += new
        path = options.keep / f"class{number}.py"
        program = render(small)
        path.write_text(f"# {key}\n# {small.as_json()}\n{program.text}", encoding="utf-8")
        mark = "NEW " if new else "open"
        print(
            f"  {mark} {per_class[key]:4d}x {key}\n         shrunk to {small.as_json()} -> {path}"
        )
    return 1 if surprises else 0


if __name__ == "__main__":
    sys.exit(main())
