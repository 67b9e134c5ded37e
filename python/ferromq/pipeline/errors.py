"""The pipeline's one error type: a problem the user can fix (pyspark or Java missing, a
bad topic pattern, Kafka unreachable, a connector jar that cannot be fetched), reported as
one line naming the thing that is wrong, never a traceback (:mod:`ferromq.pipeline.command`).
"""

from __future__ import annotations

__all__ = ["PipelineError"]


class PipelineError(Exception):
    """A one-line, user-fixable reason the job cannot start or run."""
