"""Shared scaffolding for tests that run a child process under an address-space limit (RLIMIT_AS)."""

from __future__ import annotations

import textwrap

# Set a 2 GiB address-space limit in the child and prove it bites: without that, "no MemoryError" proves nothing.
ADDRESS_SPACE_LIMIT = textwrap.dedent(
    """
    import resource, sys
    import numpy as np

    limit = 2 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:  # the limit must bite, or the test proves nothing
        np.ones(3 << 30, dtype=np.uint8)
        sys.exit("the address-space limit is not enforced")
    except MemoryError:
        pass
    """
)
