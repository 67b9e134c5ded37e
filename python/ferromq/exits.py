"""How ``ferromq`` ends when it cannot start: one line on stderr and an exit status.

2 the configuration or what it names, 3 the store cannot be opened (Redis or Kafka
unreachable, the data directory in use), 4 a listener cannot listen (port in use,
address not local). Low in the package, so the command line (:mod:`ferromq.cli`) and a
node's supervisor (:mod:`ferromq.node.supervisor`) share them without one importing
the other.
"""

from __future__ import annotations

import sys
from typing import Final

__all__ = ["EXIT_CANNOT_LISTEN", "EXIT_CONFIG_ERROR", "EXIT_STORE_UNAVAILABLE", "fail"]

EXIT_CONFIG_ERROR: Final = 2
EXIT_STORE_UNAVAILABLE: Final = 3
EXIT_CANNOT_LISTEN: Final = 4


def fail(error: Exception) -> None:
    """The one line a start-up failure prints."""
    print(f"ferromq: error: {error}", file=sys.stderr)
