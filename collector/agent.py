"""The per-node loop: sources -> attributed records -> exporter state and spool (-> shipper thread).

One window: every GPU source is collected (a failing source costs its own samples and a failure, never the
others'), engine endpoints are scraped, GPUs are attributed to workers, each engine endpoint is joined to
its GPUs (:func:`collector.workers.join_endpoint`) and workers to roles, and the window's records are
committed to the spool before anything else sees them.  The shipper runs on its own thread and never delays
sampling.  Every failure is kept with its stage, target and reason (:mod:`collector.failures`).

An engine sample carries the KV cache the engine reports holding (``kv_capacity_tokens``) and the most
requests it reports running at once (``max_running_requests``), None where it reports none, from the
endpoint's latest reading.

An engine's TP degree is what the engine says (``--tensor-parallel-size``/``--tp`` on its command line, or
its distinct ``tp_rank`` label values when more than one rank reports), else the number of GPUs its
processes hold divided by its pipeline- and data-parallel degrees; None when none of these is known.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from collector.deployments import resolve_deployment
from collector.discovery import discovered_urls, merged_urls
from collector.engine_ids import identity_of
from collector.engines import EngineDelta, EngineReading, EngineScraper
from collector.exporter import ExporterState, GpuView, StateHolder, WorkerView
from collector.failures import (
    REASON_CONNECT_ERROR,
    REASON_EXCEPTION,
    REASON_IO_ERROR,
    REASON_NO_METRICS_ENDPOINT,
    REASON_TIMEOUT,
    STAGE_DISCOVERY,
    STAGE_ENGINE,
    STAGE_POD_RESOURCES,
    STAGE_SOURCE,
    STAGE_SPOOL,
    STAGE_WINDOW,
    Failure,
    FailureLog,
)
from collector.mapping import RoleMapping
from collector.podresources import PodDevices, PodLookup, gpu_pods
from collector.procfs import ProcReader, SocketReader
from collector.roles import RoleEvidence, resolve_role
from collector.scrape import reason_of, status_of
from collector.shipper import Shipper
from collector.spool import Spool
from collector.window import GpuSource, PodRef, SourceWindow
from collector.workers import Attribution, EndpointJoin, ListenerFinder, Worker, attribute_gpus, join_endpoint
from fleet.clock import Clock
from fleet.contract import EngineSample, GpuSample, Role, RoleSource, dump_record

log = logging.getLogger(__name__)

Record = GpuSample | EngineSample


class PodResourcesSource(Protocol):
    def list(self) -> list[PodDevices]: ...


@dataclass
class _WorkerTotals:
    role: Role = Role.UNKNOWN
    role_source: RoleSource = RoleSource.NONE
    model: str = ""
    engine: str = ""
    sku: str = ""
    node: str = ""
    prompt: float = 0.0
    generation: float = 0.0
    last: EngineSample | None = None


@dataclass
class Agent:
    node: str
    clock: Clock
    cluster: str | None = None  # stamped on every record this agent makes (pools never come from names)
    gpu_sources: Sequence[GpuSource] = ()
    engines: EngineScraper | None = None
    sku_of: Callable[[str], str] = lambda name: "unknown"
    mapping: RoleMapping | None = None
    role_label_key: str | None = None
    pod_resources: PodResourcesSource | None = None
    pod_resources_target: str = "pod-resources"  # the socket path, named in failures
    pod_lookup: PodLookup | None = None
    procs: ProcReader | None = None
    sockets: SocketReader | None = None  # listening ports and fd tables: the engine-port join
    spool: Spool | None = None
    holder: StateHolder | None = None
    on_records: Callable[[list[Record]], None] | None = None  # e.g. print JSON lines
    failures: FailureLog = field(default_factory=FailureLog)
    windows: int = 0
    joins: dict[str, EndpointJoin] = field(default_factory=dict)  # engine URL -> its last join
    # On Kubernetes: scrape the /metrics endpoint each GPU-holding pod declares, beside the configured URLs.
    discover_engines: bool = False
    configured_engine_urls: tuple[str, ...] = ()
    _workers: dict[str, _WorkerTotals] = field(default_factory=dict)
    _shipper: Shipper | None = None
    _listeners: ListenerFinder | None = None

    @property
    def errors(self) -> Counter[str]:
        """Failures since start by stage (this loop's; the shipper keeps its own)."""
        return self.failures.by_stage()

    def start(self) -> None:
        """Start every source (a GPU source that cannot start raises: the operator asked for it)."""
        for source in self.gpu_sources:
            source.start()
        if self.engines is not None:
            self.engines.start()
            self._engine_outcomes(self.engines)

    def _engine_outcomes(self, engines: EngineScraper) -> None:
        """Each endpoint's last scrape as a failure (its reason from the scrape error) or a success."""
        for url in engines.urls:
            message = engines.last_error.get(url)
            if message is None:
                self.failures.ok(STAGE_ENGINE, url)
                continue
            detail = message.removeprefix(f"{url}: ").split(" [reason ")[0]
            self.failures.fail(Failure(STAGE_ENGINE, url, reason_of(message), detail, status_of(message)))

    def close(self) -> None:
        for source in self.gpu_sources:
            try:
                source.close()
            except Exception as exc:
                log.warning("closing source %s: %s", source.name, exc)

    # --- one window --------------------------------------------------------------------------------
    def collect_window(self) -> list[Record]:
        window = SourceWindow()
        for source in self.gpu_sources:
            try:
                window.merge(source.collect())
            except Exception as exc:
                log.exception("source %s failed this window: %s", source.name, exc)
                detail = f"{type(exc).__name__}: {exc}"
                self.failures.fail(Failure(STAGE_SOURCE, source.name, REASON_EXCEPTION, detail))
            else:
                self.failures.ok(STAGE_SOURCE, source.name)
        for failure in window.failures:
            self.failures.fail(failure)
        for stage, target in window.reached:
            self.failures.ok(stage, target)
        deltas: list[EngineDelta] = []
        if self.engines is not None:
            deltas, _ = self.engines.collect()
            self._engine_outcomes(self.engines)
        attribution = attribute_gpus(
            self.node,
            window.gpu_status,
            pod_holders=self._pod_holders(window),
            pod_lookup=self.pod_lookup,
            procs=self.procs,
            mapping=self.mapping,
        )
        gpu_pids = {uuid: status.pids for uuid, status in window.gpu_status.items()}
        # every endpoint that ever answered is joined, so its GPUs keep its worker id in a window it fails
        # (in the configured order: a GPU claimed by two endpoints goes to the first, every window)
        readings = {d.reading.url: d.reading for d in deltas}
        if self.engines is not None:
            last = self.engines.last
            readings = {
                u: readings.get(u) or last[u] for u in self.engines.urls if u in readings or u in last
            }
        joins = {url: self._join(reading, attribution, gpu_pids) for url, reading in readings.items()}
        if self.discover_engines and self.engines is not None:
            self._discover(attribution)
        gpu_records = [
            s if s.worker_id is not None or s.gpu_uuid not in attribution.gpu_worker
            else s.model_copy(update={"worker_id": attribution.gpu_worker[s.gpu_uuid]})
            for s in window.gpu_samples
        ]  # fmt: skip
        if self.cluster is not None:
            gpu_records = [
                s if s.cluster is not None else s.model_copy(update={"cluster": self.cluster})
                for s in gpu_records
            ]
        skus = {s.gpu_uuid: self.sku_of(s.gpu_name) for s in gpu_records}
        engine_records = [self._engine_record(d, joins[d.reading.url]) for d in deltas]
        engine_records.extend(
            s
            if s.cluster is not None or self.cluster is None
            else s.model_copy(update={"cluster": self.cluster})
            for s in window.engine_samples
        )
        for record in engine_records:
            self._account(record, skus)
        records: list[Record] = [*gpu_records, *engine_records]
        self._persist(records)
        if self.on_records is not None:
            self.on_records(records)
        self.windows += 1
        self._publish(window, gpu_records, skus, up=bool(records) or not self.gpu_sources)
        return records

    def _discover(self, attribution: Attribution) -> None:
        """Next window's engine URLs: the configured ones and those the GPU-holding pods declare."""
        assert self.engines is not None
        urls, missing = discovered_urls(list(attribution.workers.values()))
        merged = merged_urls(self.configured_engine_urls, urls)
        if merged != self.engines.urls:
            log.info("engine endpoints now %s", ", ".join(merged) or "none")
            self.engines.set_urls(merged)
        for worker_id, why in missing.items():
            detail = f"pod {worker_id} holds GPUs but declares no /metrics endpoint: {why}"
            self.failures.fail(Failure(STAGE_DISCOVERY, worker_id, REASON_NO_METRICS_ENDPOINT, detail))
        for worker_id in {w.worker_id for w in attribution.workers.values() if w.metrics and w.metrics.urls}:
            self.failures.ok(STAGE_DISCOVERY, worker_id)

    def _pod_holders(self, window: SourceWindow) -> dict[str, list[PodRef]] | None:
        if self.pod_resources is None:
            return None
        try:
            pods = self.pod_resources.list()
        except Exception as exc:
            text = str(exc)
            reason = (
                REASON_CONNECT_ERROR
                if "UNAVAILABLE" in text
                else REASON_TIMEOUT
                if "DEADLINE_EXCEEDED" in text
                else REASON_EXCEPTION
            )
            self.failures.fail(Failure(STAGE_POD_RESOURCES, self.pod_resources_target, reason, text))
            return None
        self.failures.ok(STAGE_POD_RESOURCES, self.pod_resources_target)
        whole_gpus = (s for s in window.gpu_samples if s.parent_gpu_uuid is None)
        index_to_uuid = {str(s.gpu_index): s.gpu_uuid for s in whole_gpus}
        return gpu_pods(pods, index_to_uuid)

    def _join(
        self, reading: EngineReading, attribution: Attribution, gpu_pids: Mapping[str, Sequence[int]]
    ) -> EndpointJoin:
        if self._listeners is None and self.procs is not None and self.sockets is not None:
            self._listeners = ListenerFinder(self.procs, self.sockets)
        identity = identity_of(reading)
        joined = join_endpoint(
            reading.url,
            attribution,
            self.node,
            mapping=self.mapping,
            procs=self.procs,
            sockets=self.sockets,
            listeners=self._listeners,
            gpu_pids=gpu_pids,
            reported_gpus=identity.gpu_uuids,
            reported_pids=identity.pids,
            now=self.clock.monotonic(),
        )
        previous = self.joins.get(reading.url)
        if joined.join is None and (previous is None or previous.why != joined.why):
            log.warning("engine %s: no GPUs joined (%s)", reading.url, joined.why)
        elif joined.join is not None and (previous is None or previous.join != joined.join):
            gpus = ", ".join(joined.worker.gpu_uuids)
            log.info(
                "engine %s: worker %s on %s (%s)", reading.url, joined.worker.worker_id, gpus, joined.join
            )
        self.joins[reading.url] = joined
        return joined

    def _engine_record(self, delta: EngineDelta, joined: EndpointJoin) -> EngineSample:
        reading = delta.reading
        worker: Worker = joined.worker
        gpu_uuids = list(worker.gpu_uuids) if joined.join is not None else []
        mapped = self.mapping.by_worker(worker.worker_id) if self.mapping is not None else None
        evidence = RoleEvidence(
            engine_types=reading.engine_types,
            pod_labels=worker.pod_labels,
            dynamo_components=reading.dynamo_components,
            cmdline=worker.cmdline,
            mapped_role=mapped.role if mapped is not None else None,
        )
        role, role_source = resolve_role(evidence, self.role_label_key)
        model = reading.model or (mapped.model if mapped else None) or worker.model or "unknown"
        tp = tensor_parallel(worker, reading, len(gpu_uuids))
        deployment = resolve_deployment(
            worker.pod_labels,
            namespace=worker.pod.namespace if worker.pod is not None else None,
            owner=worker.owner,
            engine_namespaces=reading.dynamo_namespaces,
            mapped=mapped.deployment if mapped is not None else None,
        )
        return EngineSample(
            ts=reading.ts,
            window_s=delta.window_s,
            worker_id=worker.worker_id,
            node=self.node,
            engine=reading.engine,
            role=role,
            role_source=role_source,
            model=model,
            precision=(mapped.precision if mapped is not None else None) or worker.precision,
            tp=min(tp, 1024) if tp else None,
            gpu_uuids=gpu_uuids,
            gpu_join=joined.join if gpu_uuids else None,
            prompt_tokens=delta.prompt_tokens,
            generation_tokens=delta.generation_tokens,
            requests_running=round(reading.running) if reading.running is not None else None,
            requests_waiting=round(reading.waiting) if reading.waiting is not None else None,
            kv_cache_usage=min(1.0, max(0.0, reading.kv_usage)) if reading.kv_usage is not None else None,
            preemptions=delta.preemptions,
            **delta.latencies(),
            cluster=self.cluster,
            deployment=deployment,
            kv_capacity_tokens=reading.kv_capacity_tokens,
            max_running_requests=reading.max_running_requests,
        )

    def _account(self, record: EngineSample, skus: dict[str, str]) -> None:
        totals = self._workers.setdefault(record.worker_id, _WorkerTotals())
        totals.role, totals.role_source, totals.model = record.role, record.role_source, record.model
        totals.engine, totals.node = record.engine, record.node
        totals.sku = next((skus[u] for u in record.gpu_uuids if u in skus), totals.sku)
        totals.prompt += record.prompt_tokens
        totals.generation += record.generation_tokens
        totals.last = record

    def _persist(self, records: list[Record]) -> None:
        if self.spool is None or not records:
            return
        try:
            self.spool.append([dump_record(r).encode() for r in records])
        except sqlite3.Error as exc:
            detail = f"could not spool {len(records)} records ({exc}): they are lost"
            self.failures.fail(Failure(STAGE_SPOOL, str(self.spool.path), REASON_IO_ERROR, detail))
            log.error("%s", detail)
        else:
            self.failures.ok(STAGE_SPOOL, str(self.spool.path))

    def _publish(
        self, window: SourceWindow, gpu_records: list[GpuSample], skus: dict[str, str], *, up: bool
    ) -> None:
        if self.holder is None:
            return
        views = []
        for sample in gpu_records:
            totals = self._workers.get(sample.worker_id or "")
            status = window.gpu_status.get(sample.gpu_uuid)
            views.append(
                GpuView(
                    sample=sample,
                    sku=skus.get(sample.gpu_uuid, "unknown"),
                    worker_id=sample.worker_id,
                    role=totals.role.value if totals else "unknown",
                    model=totals.model if totals else "",
                    reasons=status.reasons if status else frozenset(),
                )
            )
        workers = [
            WorkerView(
                worker_id=worker_id,
                role=t.role.value,
                role_source=t.role_source.value,
                model=t.model,
                engine=t.engine,
                sku=t.sku or "unknown",
                prompt_tokens_total=t.prompt,
                generation_tokens_total=t.generation,
                kv_cache_usage=t.last.kv_cache_usage if t.last else None,
                requests_running=t.last.requests_running if t.last else None,
                requests_waiting=t.last.requests_waiting if t.last else None,
                node=t.node or None,
            )
            for worker_id, t in self._workers.items()
        ]
        errors = Counter(self.failures.counts())
        targets_up = self.failures.up()
        if self._shipper is not None:
            errors.update(self._shipper.failures.counts())
            targets_up.update(self._shipper.failures.up())
        self.holder.publish(
            ExporterState(
                node=self.node,
                up=up,
                gpus=tuple(views),
                workers=tuple(workers),
                errors=dict(errors),
                targets_up=targets_up,
                last_collect_unix=self.clock.now().timestamp(),
                spool_records=self.spool.count() if self.spool is not None else None,
                spool_dropped=self.spool.dropped() if self.spool is not None else {},
            )
        )

    # --- the loop ----------------------------------------------------------------------------------
    def run(self, stop: threading.Event, interval_s: float, shipper: Shipper | None = None) -> None:
        """Collect every ``interval_s`` until ``stop``; ships on a separate thread when a shipper is given."""
        self._shipper = shipper
        ship_thread = None
        if shipper is not None:
            ship_thread = threading.Thread(target=shipper.run, args=(stop,), name="pf-shipper", daemon=True)
            ship_thread.start()
        next_at = self.clock.monotonic() + interval_s
        while not stop.wait(max(0.0, next_at - self.clock.monotonic())):
            next_at += interval_s
            if next_at < self.clock.monotonic():  # fell behind (a slow window): skip, do not burst
                next_at = self.clock.monotonic() + interval_s
            try:
                self.collect_window()
            except Exception as exc:
                log.exception("window failed: %s", exc)
                self.failures.fail(
                    Failure(STAGE_WINDOW, "", REASON_EXCEPTION, f"{type(exc).__name__}: {exc}")
                )
        if ship_thread is not None:
            ship_thread.join(timeout=10.0)


def tensor_parallel(worker: Worker, reading: EngineReading, gpus: int) -> int | None:
    """The engine's TP degree from what it says, else from the GPUs its processes hold; never a default."""
    if worker.tp:
        return worker.tp
    ranks: int | None = reading.tp_ranks
    if ranks is not None and ranks > 1:  # distinct tp_rank labels: all ranks report (SGLang)
        return ranks
    if gpus:
        per_replica_stages = (worker.pp or 1) * (worker.dp or 1)
        if gpus % per_replica_stages == 0:
            return gpus // per_replica_stages
    return None
