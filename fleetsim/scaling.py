"""A built-in scenario scaled up: ``factor`` times its nodes and its traffic, for benchmarks at fleet size."""

from __future__ import annotations

from fleetsim.scenario import Scenario, load_scenario


def scaled(name: str, factor: int) -> Scenario:
    """``name`` with every node group ``factor`` times as large and every pool's traffic ``factor`` times as
    heavy; lost-GPU events keep naming their node (renumbered to the wider node names)."""
    base = load_scenario(name)
    nodes = [group.model_copy(update={"count": group.count * factor}) for group in base.nodes]
    pools = [
        p.model_copy(
            update={"traffic": p.traffic.model_copy(update={"rate_rps": p.traffic.rate_rps * factor})}
        )
        for p in base.pools
    ]
    width = max(2, len(str(sum(g.count for g in nodes) - 1)))
    prefix = base.node_prefix
    lost = [
        spec.model_copy(update={"node": f"{prefix}{int(spec.node.removeprefix(prefix)):0{width}d}"})
        for spec in base.life.gpu_lost
    ]
    life = base.life.model_copy(update={"gpu_lost": lost})
    return base.model_copy(update={"name": f"{name}-x{factor}", "nodes": nodes, "pools": pools, "life": life})
