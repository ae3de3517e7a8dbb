"""Node and worker names in the style of a real fleet, deterministic for a scenario name.

Styles: ``nodeNN`` (``node03``, workers ``node03/decode-1``: the simulator's own habit), ``eks``
(``ip-10-0-37-142.ec2.internal``), ``gke`` (``gke-<cluster>-<node pool>-<8 hex>-<4 alnum>``) and
``fqdn`` (bare metal: ``hgx-r3u17.dc2.example.net``). In the non-default styles a worker is named like a
Kubernetes pod: ``<deployment>-<role>-<10 hex>-<5 alnum>`` (the hex shared by a deployment's role, as
a ReplicaSet's pods share their template hash). Events in a scenario always name nodes and workers by
their ``nodeNN`` keys; names are only what the records say.

A role change that replaces the pod (``replace_pods``) gives the worker a new id, named as a pod of its
new role on that node would be (``Namer.replacement``): ``node01/decode-1`` becoming prefill is
``node01/prefill-<one past the node's highest prefill index>``; a pod name takes the new role's template
hash and a fresh suffix. No id is ever given twice, so an id that stopped reporting never comes back.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable

import numpy as np

from fleetsim.scenario import NodeGroupSpec, Scenario

_POD_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' random-suffix alphabet
_HEX = "0123456789abcdef"
_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
_HOSTS = ("gpu", "hgx", "dgx", "gn", "ai")


def _rng(scenario: Scenario, what: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"{scenario.name}/{what}".encode()))


def _draw(rng: np.random.Generator, alphabet: str, n: int) -> str:
    return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), n))


def _short(text: str, limit: int) -> str:
    return text.lower().replace("_", "-").replace(".", "-")[:limit].strip("-")


class Namer:
    """Names of one scenario's nodes and workers, unique within the scenario."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.style = scenario.naming
        self._nodes = _rng(scenario, "nodes")
        self._pods = _rng(scenario, "pods")
        self._templates: dict[tuple[str, str], str] = {}
        self._groups: dict[int, str] = {}
        self._used: set[str] = set()
        self._dc = f"dc{int(self._nodes.integers(1, 9))}"

    def _unique(self, draw: Callable[[], str]) -> str:
        name = draw()
        while name in self._used:
            name = draw()
        self._used.add(name)
        return name

    def node(self, key: str, group_index: int, group: NodeGroupSpec, cluster: str | None) -> str:
        """The name a node reports (``key`` in the nodeNN style)."""
        if self.style == "nodeNN":
            return key
        rng = self._nodes

        def draw() -> str:
            if self.style == "eks":
                a, b = (int(x) for x in rng.integers(0, 256, 2))
                return f"ip-10-0-{a}-{max(b, 4)}.ec2.internal"
            if self.style == "gke":
                if group_index not in self._groups:
                    self._groups[group_index] = _draw(rng, _HEX, 8)
                pool = _short(group.node_pool or f"{group.sku}-pool", 20)
                name = _short(cluster or self.scenario.name, 20)
                return f"gke-{name}-{pool}-{self._groups[group_index]}-{_draw(rng, _ALNUM, 4)}"
            host = _HOSTS[int(rng.integers(0, len(_HOSTS)))]
            rack, unit = int(rng.integers(1, 24)), int(rng.integers(1, 42))
            return f"{host}-r{rack}u{unit}.{self._dc}.example.net"

        return self._unique(draw)

    def worker(self, key: str, node: str, deployment: str, role: str) -> str:
        """The id a worker reports (``key`` in the nodeNN style)."""
        if self.style == "nodeNN":
            self._used.add(key)
            return key
        owner = _short(deployment.rsplit("/", 1)[-1], 40)
        template = self._templates.setdefault((owner, role), _draw(self._pods, _HEX, 10))

        def draw() -> str:
            return f"{owner}-{role}-{template}-{_draw(self._pods, _POD_ALPHABET, 5)}"

        return self._unique(draw)

    def replacement(self, key: str, node: str, deployment: str, role: str) -> str:
        """The id of the pod that replaces worker ``key`` to run ``role``: never one given before."""
        if self.style != "nodeNN":
            return self.worker(key, node, deployment, role)
        prefix = f"{key.split('/', 1)[0]}/{role}-"
        pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$")
        taken = [int(m.group(1)) for used in self._used if (m := pattern.match(used))]
        name = f"{prefix}{max(taken, default=0) + 1}"
        self._used.add(name)
        return name
