"""ferromq: an MQTT 3.1.1 / 5.0 broker whose hot paths are compiled.

``ferromq._core`` (Rust, pyo3) holds the sans-IO engine; ``ferromq._protocol``
(Cython) is the asyncio IO adapter; this package orchestrates. The public codec API
is re-exported from :mod:`ferromq.codec`.
"""

from ferromq._core import __version__

__all__ = ["__version__"]
