"""Run check and fix over real training code from public repositories, the way
ruff's ecosystem check does, and hold every rewrite to the oracles.

    python -m tests.ecosystem [--clones DIR] [--repo NAME] [--diffs DIR] [--no-runs]
    (or: make ecosystem)

tests/ecosystem/corpus.toml pins each repository by commit and names its
training files.  Clones are read from `--clones` (default: $AMPLINT_ECOSYSTEM_CLONES,
else ../.mirror beside the checkout), as `<owner>+<name>/repo`, `<owner>/<name>`
or `<name>`, bare or not; a missing clone is reported and skipped.  Each
repository is exported at its commit into a scratch directory (a whole tree, so
the project model sees the helpers and callers around each file), and the named
files are checked, fixed in place and fixed again.

Fails (exit 1) on any oracle: a rewrite that does not parse, a second fix that
changes it, a finding of ours on the rewrite that the original did not have,
a new undefined, unused or redefined name (pyflakes) in it, or an internal
error.  Rewrites are compared with the sha256 each was reviewed at
(tests/ecosystem/reviewed.toml); a changed or new one is listed for review.
Then the runnable subset (tests/ecosystem_runnable.py) trains some fifty of the
scripts and their rewrites on the CPU, unless `--no-runs` or `--repo` is given.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from amplint.config import Settings
from amplint.declared_torch import with_declared_torch
from amplint.diagnostics import FileReport
from amplint.engine import lint_text
from amplint.files import read_source
from amplint.writes import write_source_atomic
from amplint.project import ROOT_MARKERS
from amplint.project.configs import LAUNCH_SUFFIXES
from amplint.rules import ALL_CODES
from amplint.runner import default_jobs, run
from amplint.selfcheck import new_findings, name_problems

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent / "ecosystem"
CORPUS = HERE / "corpus.toml"
REVIEWED = HERE / "reviewed.toml"
_PYFLAKES = ("undefined", "unused", "redefine", "shadow", "before it is assigned")

# Why a step was not rewritten, by what its message says.
_SKIP_REASONS = (
    # analysis/precision.py: the program sets its precision itself, or float16
    # cannot carry its forward pass.
    (
        "precision the program sets itself",
        re.compile(
            r"^training step not rewritten: |steps the Trainer's optimizer by hand"
            r"|casts to float16 under the program's own switch"
        ),
    ),
    (
        "low-precision hazard (BCE on probabilities, log of a sigmoid or of 1 - tanh², "
        "accumulated state)",
        re.compile(
            r"takes probabilities|takes the log of a sigmoid|takes the log of 1 - tanh"
            r"|updates `[^`]*` in place"
        ),
    ),
    ("index write of the forward pass's values", re.compile(r"writes what the forward pass")),
    ("closure", re.compile(r"closure")),
    ("gradient penalty", re.compile(r"gradient penalty")),
    ("gradients read after the step", re.compile(r"reads the gradients after the step")),
    ("gradients never cleared", re.compile(r"never clears its gradients")),
    ("FSDP", re.compile(r"FSDP")),
    ("custom CUDA kernels", re.compile(r"C\+\+/CUDA kernels")),
    ("loss raises under autocast", re.compile(r"raises under CUDA autocast")),
    ("self-check refused the rewrite", re.compile(r"not fixed: the rewrite would")),
    (
        "optimizer made elsewhere",
        re.compile(r"receives `|reaches `|from a caller|made in the calling"),
    ),
    ("loss scaled by hand in FP32", re.compile(r"loss is scaled by hand")),
    ("parameters updated by hand", re.compile(r"updated by hand|manual")),
    (
        "step's parts in other functions",
        re.compile(r"helpers? this step calls|which `\w+` fills while running the model"),
    ),
    (
        "loss not found in the step's block",
        re.compile(r"cannot find where|comes from the caller|runs in the code that calls"),
    ),
    (
        "framework or wrapper",
        re.compile(r"not a plain optimizer step|framework|goes through Accelerate"),
    ),
    ("CPU-only script", re.compile(r"never moves its model or data off the CPU")),
    ("model loaded in half precision", re.compile(r"the model is loaded in")),
    (
        "float16 overflow in the model (fill value, Gram matrix)",
        re.compile(r"overflows float16|in float16 and raises"),
    ),
    ("apex name with no torch counterpart", re.compile(r"no torch\.amp counterpart")),
    (
        "apex state no program initializes (library code)",
        re.compile(r"no amp\.initialize in this program"),
    ),
    (
        "the torch the project declares predates the API",
        re.compile(r"needs torch [\d.]+(?: \([\w.]+\))?, (?:above target-torch|target-torch is)"),
    ),
)


@dataclass
class FileRow:
    repo: str
    path: str
    findings: Counter = field(default_factory=Counter)
    status: str = "clean"  # rewritten / skipped / silent / clean / error
    detail: str = ""
    failures: list[str] = field(default_factory=list)
    digest: str | None = None  # sha256 of the rewrite
    # apex.amp users: the cause of each apex finding left after the fix.
    apex_left: list[str] | None = None
    original: str = field(default="", repr=False)
    rewrite: str = field(default="", repr=False)


def default_clones() -> Path:
    """$AMPLINT_ECOSYSTEM_CLONES, else ../.mirror beside the checkout."""
    named = os.environ.get("AMPLINT_ECOSYSTEM_CLONES")
    return Path(named) if named else Path(__file__).resolve().parent.parent.parent / ".mirror"


def _clone(clones: Path, name: str) -> Path | None:
    owner, repo = name.split("/")
    for candidate in (
        clones / f"{owner}+{repo}" / "repo",
        clones / f"{owner}+{repo}" / "repo" / ".git",
        clones / owner / repo,
        clones / owner / repo / ".git",
        clones / repo,
    ):
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
        if (candidate / ".git" / "HEAD").is_file():
            return candidate / ".git"
    return None


# What the project model reads besides modules: launch configs and scripts,
# the DeepSpeed JSON a call names, and the root markers of nested projects.
_CONFIG_SUFFIXES = tuple(suffix.encode() for suffix in (*LAUNCH_SUFFIXES, ".json"))
_ROOT_MARKERS = {marker.encode() for marker in ROOT_MARKERS}
_CONFIG_MAX_BYTES = 1 << 20  # larger JSON is data, not a config


def _export(git_dir: Path, commit: str, into: Path) -> str | None:
    """What the project model reads of the repository at `commit`, under
    `into`: Python files, notebooks, the launch and DeepSpeed configs next to
    them, and the markers of nested projects.  Blobs a shallow snapshot lacks
    are left out.  Returns an error message, or None."""
    listing = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-l", "-z", commit],
        capture_output=True,
    )
    if listing.returncode != 0:
        return listing.stderr.decode(errors="replace").strip().splitlines()[-1]
    wanted = []
    for record in listing.stdout.split(b"\0"):
        if not record:
            continue
        meta, path = record.split(b"\t", 1)
        mode, kind, blob, size = meta.split()
        if kind != b"blob" or mode == b"120000":
            continue
        config = path.endswith(_CONFIG_SUFFIXES) or path.rsplit(b"/", 1)[-1] in _ROOT_MARKERS
        if path.endswith((b".py", b".ipynb")) or (config and int(size) <= _CONFIG_MAX_BYTES):
            wanted.append((path.decode(errors="surrogateescape"), blob.decode()))
    batch = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "--batch"],
        input="".join(f"{blob}\n" for _, blob in wanted).encode(),
        capture_output=True,
    )
    data, offset = batch.stdout, 0
    for path, blob in wanted:
        end = data.index(b"\n", offset)
        header = data[offset:end].split()
        offset = end + 1
        if len(header) < 3 or header[1] != b"blob":
            continue  # missing from the snapshot
        size = int(header[2])
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data[offset : offset + size])
        offset += size + 1
    (into / ".git").mkdir(parents=True, exist_ok=True)  # the project root, as in a clone
    return None


def _has_step(text: str) -> bool:
    """Whether a loop or a def of `text` calls both `.backward(` and `.step(`: a
    step that repeats.  A module's top-level statements run once (a tutorial's
    one step of gradient descent), which is no training step to speed up."""
    if ".backward(" not in text or ".step(" not in text:
        return False
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return True
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef)):
            methods = {
                call.func.attr
                for call in ast.walk(node)
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            }
            if {"backward", "step"} <= methods:
                return True
    return False


# A file whose model is in low precision already is no FP32 step: a model
# loaded quantized (`load_in_8bit=True`, its other weights float16) or in half
# precision (`torch_dtype=torch.bfloat16`) computes in it.  Nor is a loop whose
# backward a framework owns (Accelerate, Lightning, Fabric, DeepSpeed, a
# Colossal-AI Booster or the optimizer it boosts): its switch is the framework's.
_ALREADY_MANAGED = re.compile(
    r"autocast|GradScaler|scale_loss|accelerator\.backward|manual_backward|training_step"
    r"|\.half\(\)|deepspeed|fabric\.|booster\.backward|optimizer\.backward\("
    r"|load_in_[48]bit|torch_dtype\s*=\s*torch\.b?float16"
)


def check_repo(entry: dict, clones: Path, scratch: Path, jobs: int) -> list[FileRow] | str:
    name, commit = entry["name"], entry["commit"]
    label = entry.get("label", name)  # a repository pinned twice is told apart
    git_dir = _clone(clones, name)
    if git_dir is None:
        return "missing clone"
    tree = scratch / re.sub(r"[/@]", "+", label)
    error = _export(git_dir, commit, tree)
    if error is not None:
        return f"cannot export {commit[:12]}: {error}"
    paths = [tree / relative for relative in entry["files"]]
    rows = {path: FileRow(label, relative) for path, relative in zip(paths, entry["files"])}
    present = [path for path in paths if path.exists()]
    for path in set(paths) - set(present):
        rows[path].status, rows[path].detail = "error", "not in the commit"
    # As `amplint check` run at the root resolves it: the torch the project declares.
    settings = with_declared_torch(Settings(root=tree), tree)
    originals = {path: read_source(path) for path in present}
    before = {report.path: report for report in run(present, settings, jobs=jobs)}
    # apex.amp users are fixed as a user migrating off apex runs it.
    unsafe = bool(entry.get("apex"))
    fixes = {
        report.path: report
        for report in run(present, settings, fixing=True, unsafe=unsafe, jobs=jobs)
    }
    for path in present:
        row, report = rows[path], before[path]
        row.findings = Counter(d.code for d in report.diagnostics)
        fix = fixes[path]
        if unsafe:
            row.apex_left = [
                _apex_cause(d.message) for d in fix.diagnostics if d.code in ("AMP203", "AMP204")
            ]
        for failing in (report, fix):
            if failing.error and failing.error.startswith("internal error"):
                row.failures.append(failing.error)
        if fix.fixed_text is not None:
            row.status = "rewritten"
            row.detail = ", ".join(sorted({d.code for d in fix.applied}))
            row.digest = hashlib.sha256(fix.fixed_text.encode()).hexdigest()
            row.original, row.rewrite = originals[path].text, fix.fixed_text
            write_source_atomic(fix.source, fix.fixed_text)
            row.failures += _oracles(originals[path].code, fix, settings)
        else:
            skipped = [
                d.message
                for d in report.diagnostics
                if "not rewritten" in d.message or "not fixed" in d.message
            ]
            if fix.error:
                row.status, row.detail = "skipped", fix.error
            elif skipped:
                row.status, row.detail = "skipped", _skip_reason(skipped[0])
            elif (
                not report.diagnostics
                and _has_step(originals[path].code)
                and not (_ALREADY_MANAGED.search(originals[path].code))
            ):
                row.status = "silent"
    for report in run(
        [p for p in present if rows[p].status == "rewritten"],
        settings,
        fixing=True,
        unsafe=unsafe,
        jobs=jobs,
    ):
        if report.fixed_text is not None:
            rows[report.path].failures.append("a second fix changes the rewrite")
    return [rows[path] for path in paths]


def _oracles(original: str, fix: FileReport, settings: Settings) -> list[str]:
    """What is wrong with a rewrite that `fix` wrote to disk."""
    rewritten = read_source(fix.path).code  # a notebook's cells, joined
    try:
        ast.parse(rewritten)
    except SyntaxError as error:
        return [f"the rewrite does not parse: {error}"]
    failures = []
    extra = new_findings(fix.found, lint_text(rewritten, frozenset(ALL_CODES), settings))
    failures += [f"new finding on the rewrite: {d.code} {d.message}" for d in extra]
    names = name_problems(rewritten) - name_problems(original)
    failures += [f"new name problem: {p}" for p in names if any(w in p for w in _PYFLAKES)]
    return failures


def _apex_cause(message: str) -> str:
    """Why an apex call is still there after `fix --unsafe-fixes`, in a few words."""
    why = message.split("not fixed: ", 1)[1] if "not fixed: " in message else message
    why = why.split("which is not fixed: ", 1)[-1]
    why = re.sub(r"`[^`]*`", "`...`", why).rstrip(")")
    why = re.sub(r" at line \d+| \([\w./-]+:\d+\)", "", why)  # where: not the cause
    return why.split(" (")[0].split(": run its body")[0][:100]


def _skip_reason(message: str) -> str:
    for label, pattern in _SKIP_REASONS:
        if pattern.search(message):
            return label
    return "other"


def _reviewed() -> dict[str, str]:
    if not REVIEWED.exists():
        return {}
    return dict(tomllib.loads(REVIEWED.read_text(encoding="utf-8")).get("reviewed", {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clones", type=Path, default=default_clones())
    parser.add_argument("--repo", action="append", help="only these repositories")
    parser.add_argument("--diffs", type=Path, help="write each rewrite's diff here")
    parser.add_argument("--jobs", type=int, default=default_jobs())
    parser.add_argument(
        "--no-runs",
        action="store_true",
        help="skip the runnable subset (tests/ecosystem_runnable.py: minutes of CPU)",
    )
    options = parser.parse_args(argv)
    corpus = tomllib.loads(CORPUS.read_text(encoding="utf-8"))["repo"]
    if options.repo:
        corpus = [
            entry
            for entry in corpus
            if entry["name"] in options.repo or entry.get("label") in options.repo
        ]
    reviewed = _reviewed()
    rows: list[FileRow] = []
    missing: list[str] = []
    with tempfile.TemporaryDirectory(prefix="amplint-ecosystem-") as scratch:
        for entry in corpus:
            result = check_repo(entry, options.clones, Path(scratch), options.jobs)
            if isinstance(result, str):
                missing.append(f"{entry['name']}: {result}")
                print(f"{entry['name']}: skipped, {result}", flush=True)
                continue
            if options.diffs is not None:
                _write_diffs(options.diffs, result)
            for row in result:
                key = f"{row.repo}:{row.path}"
                if row.status == "rewritten" and reviewed.get(key) != row.digest:
                    row.detail += " [not reviewed at this output]"
                findings = " ".join(
                    f"{c}x{n}" if n > 1 else c for c, n in sorted(row.findings.items())
                )
                print(
                    f"{key}  {findings or '-'}  {row.status}"
                    + (f": {row.detail}" if row.detail else ""),
                    flush=True,
                )
                for failure in row.failures:
                    print(f"    FAIL {failure}", flush=True)
            rows += result
    runs = None
    if not options.no_runs and not options.repo:
        # Imported here: the runnable subset reads this module's corpus helpers.
        from tests.ecosystem_runnable import print_table, run_subset

        print()
        runs = [row for row in run_subset(options.clones, jobs=options.jobs) if not row.skipped]
        print_table(runs)
    _summary(rows, missing, reviewed, runs)
    if not rows:
        print(_NO_CLONES.format(clones=options.clones), file=sys.stderr)
        return 2  # nothing was checked: no verdict to give
    runs_failed = runs is not None and not all(row.passed for row in runs)
    return 1 if any(row.failures for row in rows) or runs_failed else 0


# What a fresh clone meets: the corpus is public code amplint never commits.
_NO_CLONES = """\
make ecosystem checked nothing: no clone of the corpus's repositories is in {clones}.
It reads clones of the repositories tests/ecosystem/corpus.toml pins, one per
repository, as <owner>+<name>/repo, <owner>/<name> or <name> (bare or not), e.g.:
    git clone --bare https://github.com/karpathy/nanoGPT {clones}/karpathy+nanoGPT/repo
Point elsewhere with ECOSYSTEM_CLONES=DIR (make) or --clones DIR."""


def _write_diffs(out: Path, rows: list[FileRow]) -> None:
    """Each rewrite's diff, headed by the sha256 a review pins."""
    import difflib

    for row in rows:
        if row.status != "rewritten":
            continue
        diff = difflib.unified_diff(
            row.original.splitlines(True),
            row.rewrite.splitlines(True),
            f"a/{row.path}",
            f"b/{row.path}",
        )
        target = out / row.repo.replace("/", "+") / (row.path.replace("/", "__") + ".diff")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            f"# {row.repo}:{row.path} sha256 {row.digest}\n" + "".join(diff), encoding="utf-8"
        )


def _summary(
    rows: list[FileRow], missing: list[str], reviewed: dict[str, str], runs: list | None
) -> None:
    repos = {row.repo for row in rows}
    status = Counter(row.status for row in rows)
    reasons = Counter(row.detail.split(" [")[0] for row in rows if row.status == "skipped")
    rewritten = [row for row in rows if row.status == "rewritten"]
    accepted = sum(reviewed.get(f"{r.repo}:{r.path}") == r.digest for r in rewritten)
    failing = sum(bool(row.failures) for row in rows)
    print()
    print("| what | count |")
    print("|---|---:|")
    print(f"| files | {len(rows)} |")
    print(f"| repositories | {len(repos)} (missing: {len(missing)}) |")
    print(f"| files with findings | {sum(bool(r.findings) for r in rows)} |")
    print(f"| rewritten | {status['rewritten']} |")
    for reason, count in reasons.most_common():
        print(f"| skipped: {reason} | {count} |")
    print(f"| silent (a step, no finding, no AMP in the file) | {status['silent']} |")
    print(f"| oracle failures | {failing} |")
    if runs is not None:
        passed = sum(row.passed for row in runs)
        print(
            f"| runnable subset passed (CPU: default, bf16, fp16; verify) | {passed} of {len(runs)} |"
        )
    print(f"| rewrites reviewed by hand at this output | {accepted} of {len(rewritten)} |")
    for line in missing:
        print(f"missing: {line}")
    apex = [row for row in rows if row.apex_left is not None]
    if apex:
        left = Counter(cause for row in apex for cause in row.apex_left)
        print()
        print(f"apex.amp users: {len({r.repo for r in apex})} repositories, {len(apex)} files")
        print()
        print("| apex calls left after `fix --apply --unsafe-fixes`, by cause | count |")
        print("|---|---:|")
        for cause, count in left.most_common():
            print(f"| {cause} | {count} |")
        print(f"| total | {sum(left.values())} |")


if __name__ == "__main__":
    sys.exit(main())
