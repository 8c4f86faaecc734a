"""A stand-in for ManiSkill3's package, for tests on machines without it (or without Vulkan):
``import mani_skill.envs`` registers ``PickCube-v1`` with gymnasium as a small numpy task with
PickCube's spaces (42 state numbers, 8 joint actions), and ``CPUGymWrapper`` and
``REGISTERED_ENVS`` answer what rlcore/envs/maniskill.py reads of ManiSkill."""
