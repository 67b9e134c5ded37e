"""The jobs under ``spark-submit``: the same command line as ``ferromq pipeline run``
(:mod:`.command`), without ``--master``'s default, so spark-submit's applies::

    spark-submit --master spark://host:7077 --jars "$(ferromq pipeline jars)" \\
        "$(python -c 'import ferromq.pipeline.submit as m; print(m.__file__)')" \\
        telemetry --source files --directory /data/stream --output /data/tables

The driver needs ``ferromq`` importable (installed, or on ``PYTHONPATH``); the executors
do not: the jobs are column expressions that run in the JVM.
"""

from __future__ import annotations

import sys

from ferromq.pipeline.command import submit_main

if __name__ == "__main__":
    sys.exit(submit_main(sys.argv[1:]))
