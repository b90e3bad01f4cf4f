"""``python -m dmlbridge``: the same as the ``dmlbridge`` command."""

import sys

from dmlbridge.cli import main

sys.exit(main())
