"""Allow `python -m amplint`."""

from amplint.cli import main

if __name__ == "__main__":
    main()
