"""What one source hands the agent for one window, and the bounded vocabulary of degradation reasons."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from collector.failures import Failure
from fleet.contract import EngineSample, GpuSample

# Why a GPU's telemetry is degraded: a fixed set, so the exporter's {reason} label stays bounded.
REASON_GPM_UNSUPPORTED = "gpm_unsupported"  # fell back to nvmlDeviceGetUtilizationRates
REASON_METRIC_MISSING = "metric_missing"  # a ratio the source should give is absent (muted or failed)
REASON_CALL_TIMEOUT = "call_timeout"  # an NVML call ran past its deadline: window incomplete
REASON_DRIVER_UNRESPONSIVE = "driver_unresponsive"  # blocked calls piled up; GPU not polled this window
REASON_NO_PERMISSION = "no_permission"  # a capability is missing (see GpuStatus.details)
REASON_NVML_ERROR = "nvml_error"  # another NVML error on some call
REASON_PROFILING_ZERO = "profiling_zero_while_busy"  # DCGM PROF reads 0 while GPU_UTIL > 0: broken, not idle
REASON_SCRAPE_FAILED = "scrape_failed"  # the exporter could not be read this window
DEGRADED_REASONS = (
    REASON_GPM_UNSUPPORTED,
    REASON_METRIC_MISSING,
    REASON_CALL_TIMEOUT,
    REASON_DRIVER_UNRESPONSIVE,
    REASON_NO_PERMISSION,
    REASON_NVML_ERROR,
    REASON_PROFILING_ZERO,
    REASON_SCRAPE_FAILED,
)


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    container: str | None = None

    @property
    def worker_id(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class GpuStatus:
    """Side facts about one GPU this window: why it is degraded, who runs on it."""

    gpu_uuid: str
    reasons: frozenset[str] = frozenset()
    details: tuple[str, ...] = ()  # human sentences, e.g. which capability is missing
    pids: tuple[int, ...] = ()  # host PIDs of compute processes (NVML)
    pod: PodRef | None = None  # from dcgm-exporter's Kubernetes labels
    pod_labels: Mapping[str, str] = field(default_factory=dict)  # sanitised pod labels (dcgm-exporter)


@dataclass
class SourceWindow:
    gpu_samples: list[GpuSample] = field(default_factory=list)
    gpu_status: dict[str, GpuStatus] = field(default_factory=dict)
    engine_samples: list[EngineSample] = field(default_factory=list)  # finished records (the sim source)
    failures: list[Failure] = field(default_factory=list)  # what failed this window, where and why
    reached: list[tuple[str, str]] = field(default_factory=list)  # (stage, target) that answered this window

    @property
    def errors(self) -> Counter[str]:
        """Failures this window by stage."""
        return Counter(f.stage for f in self.failures)

    def merge(self, other: SourceWindow) -> None:
        """Add another source's window.  A GPU both sources report keeps the first source's sample and
        reasons; the second contributes only what the first lacks (PIDs, pod, pod labels)."""
        seen = {s.gpu_uuid for s in self.gpu_samples}
        self.gpu_samples.extend(s for s in other.gpu_samples if s.gpu_uuid not in seen)
        for uuid, status in other.gpu_status.items():
            mine = self.gpu_status.get(uuid)
            if mine is None:
                self.gpu_status[uuid] = status
            else:
                self.gpu_status[uuid] = replace(
                    mine,
                    pids=mine.pids or status.pids,
                    pod=mine.pod or status.pod,
                    pod_labels={**status.pod_labels, **mine.pod_labels},
                )
        self.engine_samples.extend(other.engine_samples)
        self.failures.extend(other.failures)
        self.reached.extend(other.reached)


class GpuSource(Protocol):
    """A source of gpu_sample records (nvml, dcgm, sim).  ``start`` primes it (GPM takes a first sample)."""

    name: str

    def start(self) -> None: ...
    def collect(self) -> SourceWindow: ...
    def close(self) -> None: ...
