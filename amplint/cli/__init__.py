"""The command line: wiring between click, settings, the engine and reports.

One module per command; `common` holds what they share.  Importing this
package must stay cheap: a run where no file could hold a finding never loads
libcst or the rules (tests/test_fast_path.py).
"""

from __future__ import annotations

import gc
import os
import sys
from typing import NoReturn

import click

from amplint import __version__
from amplint.cli.check import check
from amplint.cli import common
from amplint.cli.common import EXIT_INTERRUPTED
from amplint.cli.fix import fix
from amplint.cli.rules import clean, list_rules, rule
from amplint.cli.server import server
from amplint.cli.verify import verify
from amplint.terminal import choose_color
from amplint.workers import release_early_worker


class _Group(click.Group):
    """click's group, but Ctrl-C exits 130 (not 1, which means "findings");
    and it remembers the arguments it was run with (verify's evidence names
    its command)."""

    def main(self, args=None, *rest, **options):
        common.invoked_with[:] = list(sys.argv[1:] if args is None else args)
        common.stdin_taken = False
        return super().main(args, *rest, **options)

    def invoke(self, ctx: click.Context):
        # --color is a check/fix option kept in amplint.terminal: a command run
        # after another in the same process (a test, an editor) starts on auto.
        choose_color("auto")
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("Aborted!", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except click.ClickException:
            common.echo_unread_stdin()  # `fix - --dtype float64`: a usage error
            raise
        except SystemExit as stop:
            if stop.code not in (None, 0):
                common.echo_unread_stdin()  # `fix - -o /unwritable/x`
            raise


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="amplint")
def main() -> None:
    """Find and fix PyTorch mixed-precision (AMP) mistakes."""


for command in (check, fix, verify, list_rules, rule, clean, server):
    main.add_command(command)


def run() -> NoReturn:
    """The `amplint` command and `python -m amplint`: `main`, then an exit
    that leaves the interpreter's heap as it is.  Tearing down the modules
    libcst and the rules loaded costs a tenth of a one-file check (a
    pre-commit hook's run); mypy exits the same way.  Everything a command
    writes is closed before it returns, so only the standard streams are
    left to flush."""
    # A run allocates millions of objects that live until their file is done
    # (libcst's trees); the cyclic collector's default, a pass every 700
    # allocations, walks them again and again: a tenth of a check of torch
    # and a fifth of a fix.  Workers are forked from here and keep it.
    gc.set_threshold(50_000, 20, 20)
    try:
        main()
        code: object = 0
    except SystemExit as stop:
        code = stop.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    release_early_worker()  # forked as the command started, and not needed
    for stream in (sys.stdout, sys.stderr):
        if stream is None or stream.closed:
            continue  # `amplint server` closes standard output when its client exits
        try:
            stream.flush()
        except OSError:  # a reader that went away (`| head`): as Python's own exit says it
            code = 120
    os._exit(code)
