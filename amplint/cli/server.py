"""`amplint server`: the language server, for editors."""

from __future__ import annotations

import sys

import click

from amplint.cli.common import EXIT_ERROR, say_error


@click.command()
def server() -> None:
    """Run the language server over standard input and output.

    Editors start it (see the README's set-ups for VS Code, Neovim and Helix):
    findings as diagnostics while you type, each fix as a quick fix, every
    safe fix as the `source.fixAll.amplint` action."""
    try:
        from amplint.server import serve
    except ImportError as error:
        if error.name not in ("pygls", "lsprotocol") and not str(error.name).startswith("pygls."):
            raise
        say_error("amplint server needs pygls: pip install 'amplint[server]'")
        sys.exit(EXIT_ERROR)
    serve()
