"""A checkpoint's files: the components' own state, whole weights, and FSDP2's shards read
without running their code."""
