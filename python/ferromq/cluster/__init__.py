"""The cluster (issue 17, docs/cluster.md): nodes that act as one broker through Kafka
and Redis, with no links between them.

- :mod:`.names`: the Kafka topics and Redis keys every node agrees on.
- :mod:`.membership`: who is in the cluster and alive (a Redis registry and heartbeat).
- :mod:`.bus`: Kafka as the bus between nodes (the subscription topic, each node's topic).
- :mod:`.ownership`: one owner node per client id, sessions moving between nodes, and a
  dead node's sessions adopted by a survivor.
- :mod:`.node`: the :class:`~ferromq.cluster.node.ClusterNode` a broker starts when
  ``[cluster] node_id`` is set.
"""
