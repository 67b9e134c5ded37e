"""One node on every core (issue 16, docs/shards.md): the supervisor that starts one
shard process per core, what each shard is told about the others, the bus between
their engines and the hand-over of a connection to the shard that owns its client id."""
