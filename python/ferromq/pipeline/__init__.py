"""The Spark side of the stream (issue 15): PySpark jobs over the broker's records.

The broker writes every accepted message and lifecycle event as a record of
``ferromq/stream/record-v1.avsc`` to Kafka or to Avro files (``[stream]``); the jobs read
them (:mod:`.sources`, :mod:`.records`), transform them with plain DataFrame → DataFrame
functions (:mod:`.transforms`), and write tables partitioned by date (:mod:`.output`).
``ferromq pipeline run JOB`` (:mod:`.cli`, :mod:`.command`, :mod:`.runner`) runs a job in
``local[*]``; :mod:`.submit` is the same job for ``spark-submit`` to a cluster.

Layout: :mod:`.errors` (the one error type), :mod:`.jars` (connector jars from Maven
Central, cached), :mod:`.session` (checks, then the SparkSession), :mod:`.jobs` (what each
job computes), :mod:`.progress` (the streaming query listener's log).

pyspark is the ``pipeline`` extra; this package imports it only where a job runs.
"""
