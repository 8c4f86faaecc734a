"""ManiSkill's registry of task classes, as rlcore reads it (``REGISTERED_ENVS[task].cls``)."""

from dataclasses import dataclass


@dataclass
class Registered:
    cls: type


REGISTERED_ENVS: dict[str, Registered] = {}
