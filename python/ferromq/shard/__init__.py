"""A shard of a node (issue 16, docs/shards.md), the side the broker runs: what a shard
is told about the others (:mod:`.identity`), its line to the supervisor (:mod:`.link`),
the bus between the engines (:mod:`.bus_pump`), the client-id routing that decides
which shard serves a connection (:mod:`.routing`) and the hand-over that takes it to the
shard that owns its client id (:mod:`.handover`), and what it serves the node on its
private sockets (:mod:`.private`, :mod:`.sys_figures`). It imports nothing of the
supervisor's (:mod:`ferromq.node`), which sits above the broker."""
