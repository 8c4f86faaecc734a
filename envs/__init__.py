"""Environment adapters and the env plug-in registry (gymnasium ids, ``module:Class`` entry
points, ManiSkill). The adapters arrive with the embodied runner (issue #4); docs/architecture.md
tracks what is built.
"""
