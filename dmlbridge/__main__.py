"""``python -m dmlbridge``: the same as the ``dmlbridge`` command."""

import sys

from dmlbridge.cli.commands import main

sys.exit(main())
