"""The pipeline's one error type: a problem the user can fix (pyspark or Java missing, a
bad topic pattern, Kafka unreachable, a connector jar that cannot be fetched), reported as
one line naming the thing that is wrong, never a traceback (:mod:`ferromq.pipeline.command`);
and the exit statuses of a job, which the command and the runner both return.
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXIT_FAILED", "EXIT_SETUP", "PipelineError"]

EXIT_FAILED: Final = 1
"""The job failed while running (the query's error)."""
EXIT_SETUP: Final = 2
"""A problem to fix before the job can start."""


class PipelineError(Exception):
    """A one-line, user-fixable reason the job cannot start or run."""
