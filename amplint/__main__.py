"""Allow `python -m amplint`."""

import os
import sys

# `python -m` puts the working directory first on sys.path, so a checked
# project's own click.py or libcst.py would be imported (and run) in place of
# the real one.  amplint itself is already imported; nothing else should come
# from there.
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.getcwd():
    del sys.path[0]

from amplint.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
