"""``python -m dmlbridge``: the same as the ``dmlbridge`` command (``--version`` answered before the library is
imported)."""

import sys

from dmlbridge.cli.early import answered_early

if answered_early(sys.argv[1:]):
    sys.exit(0)

from dmlbridge.cli.commands import main  # (after --version, which needs none of the library)

sys.exit(main())
