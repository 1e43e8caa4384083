"""Allow `python -m amplint`."""

import os
import sys

# `python -m` puts the working directory first on sys.path, so a checked
# project's own click.py or libcst.py would be imported (and run) in place of
# the real one.  amplint itself is already imported; nothing else should come
# from there.  What CPython imports while starting runpy (keyword, types, re)
# comes from there before this line runs, which no code here can prevent: the
# README gives `python -P -m amplint` (3.11+) and the `amplint` command, which
# leave the directory off the path (tests/test_reliability.py shows both).
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.getcwd():
    del sys.path[0]

from amplint.launch import run  # noqa: E402

if __name__ == "__main__":
    run()
