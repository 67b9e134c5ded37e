"""Sparkplug B decoding: the ``sparkplug`` job's state machine (:mod:`.decode`, pure
Python and protobuf), its Spark side (:mod:`.frames`) and the vendored Protobuf schema
(:mod:`.descriptor`, ``sparkplug_b.proto``: Eclipse Tahu's, EPL-2.0).

Importing this package imports neither pyspark nor pandas.
"""
