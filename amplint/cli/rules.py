"""`amplint rules`, `amplint rule` and `amplint clean`: the rule catalogue and
the cache, apart from any run."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import sys
from pathlib import Path

import click

from amplint.cache import CACHE_DIR_NAME, is_amplint_cache
from amplint.catalog import RuleDoc, load_catalog
from amplint.cli.common import EXIT_CLEAN, EXIT_ERROR, say_error, say_warning
from amplint.terminal import color

_FORMATS = click.Choice(("text", "json"))


def _record(doc: RuleDoc) -> dict:
    return {
        "code": doc.code,
        "name": doc.name,
        "summary": doc.summary,
        "fix": doc.fix,
        "min_torch": doc.min_torch,
        "explanation": doc.body + "\n",
    }


@click.command(name="rules")
@click.option("--output-format", type=_FORMATS, default="text", show_default=True)
def list_rules(output_format: str) -> None:
    """List every rule: code, name, fix, summary."""
    docs = list(load_catalog().values())
    if output_format == "json":
        click.echo(json.dumps([_record(doc) for doc in docs], indent=2))
        return
    for doc in docs:
        click.echo(f"{doc.code}  {doc.name:<28} {doc.fix:<7} {doc.summary}")


@click.command()
@click.argument("rule_name", metavar="CODE_OR_NAME", required=False)
@click.option("--all", "every", is_flag=True, help="Print every rule's document.")
@click.option("--output-format", type=_FORMATS, default="text", show_default=True)
def rule(rule_name: str | None, every: bool, output_format: str) -> None:
    """Print the document of a rule, named by code (AMP001) or name
    (fp32-training-step): its title, whether it has a fix and which torch
    it needs, and its explanation, as Markdown (`--output-format json` gives
    the fields)."""
    catalog = load_catalog()
    if every == (rule_name is not None):
        say_error("name one rule, or give --all")
        sys.exit(EXIT_ERROR)
    docs = list(catalog.values()) if every else [_find(catalog, rule_name)]
    if output_format == "json":
        records = [_record(doc) for doc in docs]
        click.echo(json.dumps(records if every else records[0], indent=2))
        return
    for index, doc in enumerate(docs):
        if index:
            click.echo()
        title, _, explanation = doc.body.partition("\n")
        if _on_terminal():
            title = click.style(title, bold=True)
        torch = "Any torch." if doc.min_torch == "any" else f"Needs torch >= {doc.min_torch}."
        click.echo(f"{title}\n\n{_FIX_LINES[doc.fix]} {torch}", color=color())
        click.echo(explanation)


# What the `fix:` of a rule's front matter means to the reader, as ruff says it.
_FIX_LINES = {
    "safe": "Fix is always available: `amplint fix --apply` applies it.",
    "unsafe": "Fix is available as unsafe: `amplint fix --apply --unsafe-fixes` applies it.",
    "none": "No fix: the finding says what to change.",
}


def _on_terminal() -> bool:
    return sys.stdout.isatty()


def _find(catalog: dict[str, RuleDoc], wanted: str) -> RuleDoc:
    by_name = {doc.name: doc for doc in catalog.values()}
    doc = catalog.get(wanted.upper()) or by_name.get(wanted.lower().replace("_", "-"))
    if doc is not None:
        return doc
    close = difflib.get_close_matches(wanted.lower(), list(by_name), n=1)
    hint = f" (did you mean `{close[0]}`, {by_name[close[0]].code}?)" if close else ""
    say_error(f"unknown rule `{wanted}`{hint}; `amplint rules` lists them")
    sys.exit(EXIT_ERROR)


@click.command()
@click.option(
    "--cache-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="AMPLINT_CACHE_DIR",
    help="A cache directory to remove too (as check and fix take it).",
)
def clean(cache_dir: Path | None) -> None:
    """Remove amplint's caches: every .amplint_cache under the current
    directory, and --cache-dir / AMPLINT_CACHE_DIR."""
    found = []
    for directory, subdirectories, _ in os.walk("."):
        if CACHE_DIR_NAME in subdirectories:
            found.append(Path(directory) / CACHE_DIR_NAME)
        subdirectories[:] = [
            name for name in subdirectories if name not in (CACHE_DIR_NAME, ".git")
        ]
    if cache_dir is not None and cache_dir.is_dir():
        found.append(cache_dir)
    for directory in found:
        if not is_amplint_cache(directory):  # never remove what amplint did not make
            say_warning(f"{directory}: not removed, it does not look like amplint's cache")
            continue
        shutil.rmtree(directory, ignore_errors=True)
        click.echo(f"Removed {directory}")
    if not found:
        click.echo("No cache to remove.")
    sys.exit(EXIT_CLEAN)
