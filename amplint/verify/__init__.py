"""`amplint verify`: run a script and amplint's rewrite of it, and compare.

rewrite.py makes what the AMP run runs (the script and the --rewrite paths,
as fix would write them); harness.py runs inside each child process (it
imports torch); runs.py starts the children and reads what they measured;
compare.py turns the measurements into speedup, memory ratio, loss parity and
a verdict.  Only this package runs user code, and only in child processes.
"""

EXIT_PASSED, EXIT_FAILED, EXIT_ERROR, EXIT_NOTHING = 0, 1, 2, 3


class VerifyError(Exception):
    """Ends `verify` with `exit_code`, a one-line message for the user and the
    lines that show why (the end of a run's stderr)."""

    def __init__(self, exit_code: int, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.detail = detail
