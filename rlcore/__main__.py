"""``python -m rlcore``: the ``rlcore`` command (rlcore/cli.py) without the installed script:
``python -m rlcore embodied [key=value ...]`` and ``python -m rlcore reasoning ...`` train as the
example entry points do; ``config``, ``placement``, ``keys`` and ``export`` as ``rlcore``'s."""

import sys

from rlcore.cli import main

if __name__ == "__main__":
    sys.exit(main())
