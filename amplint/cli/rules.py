"""`amplint rules` and `amplint rule`: the rule catalogue."""

from __future__ import annotations

import sys

import click

from amplint.catalog import load_catalog
from amplint.cli.common import (
    EXIT_ERROR,
    say_error,
)


@click.command(name="rules")
def list_rules() -> None:
    """List every rule: code, name, fix, summary."""
    for doc in load_catalog().values():
        click.echo(f"{doc.code}  {doc.name:<28} {doc.fix:<7} {doc.summary}")


@click.command()
@click.argument("code")
def rule(code: str) -> None:
    """Print the document of rule CODE."""
    doc = load_catalog().get(code.upper())
    if doc is None:
        say_error(f"unknown rule `{code}`; `amplint rules` lists them")
        sys.exit(EXIT_ERROR)
    click.echo(doc.text, nl=False)
