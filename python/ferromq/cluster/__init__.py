"""A node as one of many (issue 17): no node-to-node links, everything between nodes
through Kafka and Redis (docs/cluster.md).

:mod:`~ferromq.cluster.membership` keeps who the nodes are and which are alive in
Redis; :mod:`~ferromq.cluster.figures` is what a node reports of its cluster traffic to
the admin listener, ``$SYS`` and ``/metrics``.
"""
