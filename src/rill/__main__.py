"""``python -m rill``: the same as the ``rill`` command."""

import sys

from rill.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
