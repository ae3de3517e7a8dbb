"""What a serving engine's own ``/metrics`` says about the GPUs and processes it runs on.

Two kinds of label are evidence for the engine-to-GPU join (``gpu_join="engine-labels"``):

* GPU or MIG UUIDs (``GPU-…``/``MIG-…``) in a ``gpu_uuid``/``UUID``/``uuid``/``device_uuid`` label, as
  Triton-style servers put on per-GPU series.  Index labels (``gpu="0"``) are not used: inside a container
  ``CUDA_VISIBLE_DEVICES`` renumbers devices, so an index names no particular GPU of the node.
* Process ids in a ``pid`` label: SGLang puts its scheduler's PID on some gauges (the real capture
  ``sglang_via_dynamo_worker_qwen3-0.6b.prom`` carries ``pid="697544"`` on ``sglang:num_retracted_reqs``).  It
  is the PID in the engine's own PID namespace, so it is matched to NVML's host PIDs through ``NSpid``
  (:mod:`collector.procfs`), and a PID that matches processes of two containers is dropped as ambiguous.

The engine scraper (``collector/engines.py``) reads the exposition; :func:`engine_identity` is what it calls
to fill ``EngineReading.identity``, and :func:`identity_of` reads that field back, empty when a reading does
not carry one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from collector.promtext import Exposition

GPU_UUID_LABELS = ("gpu_uuid", "UUID", "uuid", "device_uuid")
PID_LABELS = ("pid",)
_GPU_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f/-]{7,}$")
MAX_IDS = 1024


@dataclass(frozen=True)
class EngineIdentity:
    gpu_uuids: frozenset[str] = frozenset()
    pids: frozenset[int] = frozenset()


def engine_identity(exposition: Exposition) -> EngineIdentity:
    uuids: set[str] = set()
    pids: set[int] = set()
    for sample in exposition.samples:
        labels = sample.labels
        if not labels:
            continue
        for name in GPU_UUID_LABELS:
            value = labels.get(name)
            if value and _GPU_UUID.match(value) and len(uuids) < MAX_IDS:
                uuids.add(value)
        for name in PID_LABELS:
            value = labels.get(name)
            if value and value.isdigit() and int(value) > 0 and len(pids) < MAX_IDS:
                pids.add(int(value))
    return EngineIdentity(frozenset(uuids), frozenset(pids))


def identity_of(reading: object) -> EngineIdentity:
    """The identity an engine reading carries (``reading.identity``), or an empty one."""
    identity = getattr(reading, "identity", None)
    return identity if isinstance(identity, EngineIdentity) else EngineIdentity()
