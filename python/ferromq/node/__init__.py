"""One node on every core (issue 16, docs/shards.md), the supervisor's side: the
supervisor that starts one shard process per core (:mod:`.supervisor`), how many and on
which CPUs (:mod:`.workers`) and the node's admin listener (:mod:`.admin`). The top
floor with the command line: nothing below imports it. What a shard runs is
:mod:`ferromq.shard`."""
