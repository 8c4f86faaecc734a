"""rlcore.placement: ``cluster.component_placement`` -> ``PlacementPlan``. Pure, no Ray.

The grammar is documented in ``rlcore/placement/grammar.py`` and docs/placement.md.
"""

from rlcore.placement.components import COMPONENTS, ComponentRoles, component_roles
from rlcore.placement.grammar import PlacementError, parse_value
from rlcore.placement.plan import (
    PlacementPlan,
    Process,
    RankPlacement,
    build_plan,
    runs_in_driver,
)
from rlcore.placement.resolve import ClusterSpec, plan_for_config, resolve_cluster

__all__ = [
    "COMPONENTS",
    "ClusterSpec",
    "ComponentRoles",
    "PlacementError",
    "PlacementPlan",
    "Process",
    "RankPlacement",
    "build_plan",
    "component_roles",
    "parse_value",
    "plan_for_config",
    "resolve_cluster",
    "runs_in_driver",
]
