"""Prove on real code that the triggers drop no finding.

    python -m tests.trigger_audit [--clones DIR] [--tree PATH ...] [--jobs N]
                                                          (or: make trigger-audit)

A trigger (amplint/triggers.py) decides from a file's text and compiled code
whether a rule may fire, so that most files never reach libcst.  It must never
say no where the rule finds something.  tests/test_prefilter.py holds that on
every sample we wrote; this holds it on every Python file of the ecosystem
corpus (each repository at the commit tests/ecosystem/corpus.toml pins, read
from its clone's git objects) and of the installed torch package: each file is
parsed and every rule checks it with the trigger bypassed, under the settings
test_prefilter uses.  Prints each file where a rule fires and its trigger said
no, or where a rule raises, and exits 1 if there is one.  Slow (every file goes
through libcst): not part of the suite; run it after changing a trigger.
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.engine import MAX_PARSE_CHARS
from amplint.prefilter import SourceClues
from amplint.rules import RULES
from amplint.triggers import TRIGGERS
from tests.bench import installed_torch
from tests.ecosystem import CORPUS, _clone, default_clones, tomllib
from tests.helpers import EVERY_RULE_SETTINGS

# Files above this many lines are left out, as amplint check leaves them out
# (file-line-limit); libcst on them takes most of the audit's time.
MAX_LINES = 20_000


def files_in_clones(clones: Path) -> Iterator[tuple[str, str]]:
    """(origin, text) of every .py file of each corpus repository at its pinned
    commit, read from its clone under `clones` as `make ecosystem` finds it."""
    seen = set()
    for entry in tomllib.loads(CORPUS.read_text(encoding="utf-8"))["repo"]:
        name, commit = entry["name"], entry["commit"]
        if name in seen:
            continue
        seen.add(name)
        git_dir = _clone(clones, name)
        if git_dir is None:
            print(f"{name}: no clone under {clones}, skipped", file=sys.stderr)
            continue
        git = ["git", "--git-dir", str(git_dir)]
        listing = subprocess.run(
            [*git, "ls-tree", "-r", "-z", commit], capture_output=True, check=True
        ).stdout
        blobs = []
        for entry in listing.split(b"\0"):
            meta, _, path = entry.partition(b"\t")
            if path.endswith(b".py") and meta.split()[1:2] == [b"blob"]:
                blobs.append((path.decode(errors="replace"), meta.split()[2]))
        if not blobs:
            continue
        contents = subprocess.run(
            [*git, "cat-file", "--batch"],
            input=b"".join(blob + b"\n" for _, blob in blobs),
            capture_output=True,
            check=True,
        ).stdout
        offset = 0
        for path, _ in blobs:
            header_end = contents.index(b"\n", offset)
            size = int(contents[offset:header_end].split()[2])
            body = contents[header_end + 1 : header_end + 1 + size]
            offset = header_end + 1 + size + 1
            yield f"{name}@{commit[:7]}:{path}", body.decode("utf-8", errors="replace")


def files_in_tree(tree: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(tree.rglob("*.py")):
        yield str(path), path.read_text(encoding="utf-8", errors="replace")


def dropped(item: tuple[str, str]) -> tuple[str, list[str], bool]:
    """The codes a rule finds in the file though its trigger says no, and
    whether the file was audited (parsed) at all."""
    origin, text = item
    if len(text) > MAX_PARSE_CHARS or text.count("\n") > MAX_LINES:
        return origin, [], False
    clues = SourceClues(text)
    if clues.too_deep_to_parse is not None:
        return origin, [], False
    try:
        module = cst.parse_module(text)
    except Exception:  # not Python libcst reads: amplint reports AMP900 there
        return origin, [], False
    found = set()
    for settings in EVERY_RULE_SETTINGS:
        facts = ModuleFacts(module, text)
        for rule in RULES:
            if rule.code in found:
                continue
            try:
                if next(iter(rule.check(facts, settings)), None) is not None:
                    found.add(rule.code)
            except Exception as error:  # amplint reports it as an internal error
                return origin, [f"{rule.code} raised {error!r:.200}"], True
    return origin, sorted(code for code in found if not TRIGGERS[code](clues)), True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clones", type=Path, default=default_clones())
    parser.add_argument("--tree", type=Path, action="append", help="default: installed torch")
    parser.add_argument("--jobs", type=int, default=multiprocessing.cpu_count())
    options = parser.parse_args()
    trees = options.tree or [installed_torch()]

    def everything() -> Iterator[tuple[str, str]]:
        if options.clones.is_dir():
            yield from files_in_clones(options.clones)
        for tree in trees:
            yield from files_in_tree(tree)

    started = time.monotonic()
    audited = failures = crashes = 0
    with multiprocessing.get_context("fork").Pool(options.jobs) as pool:
        for origin, codes, parsed in pool.imap_unordered(dropped, everything(), chunksize=8):
            audited += parsed
            if codes and " raised " in codes[0]:
                crashes += 1  # not the triggers' fault, but nobody else would see it
                print(f"{origin}: {codes[0]}", flush=True)
            elif codes:
                failures += 1
                print(f"{origin}: trigger says no, but {', '.join(codes)} fires", flush=True)
    print(
        f"{audited:,} files audited in {time.monotonic() - started:.0f} s: "
        f"{failures} where a trigger drops a finding, {crashes} where a rule raised"
    )
    sys.exit(1 if failures or crashes else 0)


if __name__ == "__main__":
    main()
