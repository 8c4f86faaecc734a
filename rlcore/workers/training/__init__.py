"""Training infrastructure both modes' trained components share: the trainer (mini-batches,
micro-batches, optimiser steps) and the strategies that parallelise it (DDP, FSDP2, Megatron)."""
