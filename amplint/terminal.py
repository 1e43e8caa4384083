"""What amplint shows on a terminal and hides elsewhere: colour and progress."""

from __future__ import annotations

import os
import sys

import click

COLOR_CHOICES = ("auto", "always", "never")
_color_choice = "auto"


def choose_color(choice: str) -> None:
    """`--color`: always or never override the terminal test and the variables."""
    global _color_choice
    _color_choice = choice


def color() -> bool | None:
    """Styles on a terminal only (click's own test), never with NO_COLOR set,
    always with FORCE_COLOR set (https://no-color.org), unless `--color`
    said always or never."""
    if _color_choice != "auto":
        return _color_choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return None


class ProgressBar:
    """A bar on stderr while files are analysed: on a terminal, for runs with
    enough files to be worth watching; nothing otherwise (CI logs, pipes)."""

    MIN_FILES = 8

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self._bar = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < self.MIN_FILES:
            return
        if self._bar is None:
            self._bar = click.progressbar(
                length=total, label="Analysing", file=sys.stderr, color=color()
            )
            self._bar.__enter__()
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


class RunProgress:
    """``baseline: step 12 of 50`` on one stderr line while a run goes on."""

    def __call__(self, name: str, done: int, total: int) -> None:
        click.echo(f"\r\x1b[K{name}: step {done} of {total}", err=True, nl=False)

    def clear(self) -> None:
        click.echo("\r\x1b[K", err=True, nl=False)
