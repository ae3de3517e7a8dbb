"""The per-node loop: sources -> attributed records -> exporter state and spool (-> shipper thread).

One window: every GPU source is collected (a failing source costs its own samples and an error count,
never the others'), engine endpoints are scraped, GPUs are attributed to workers and workers to roles,
and the window's records are committed to the spool before anything else sees them.  The shipper runs
on its own thread and never delays sampling.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from collector.clock import Clock
from collector.deployments import resolve_deployment
from collector.engines import EngineDelta, EngineScraper
from collector.exporter import ExporterState, GpuView, StateHolder, WorkerView
from collector.mapping import RoleMapping
from collector.podresources import PodDevices, PodLookup, gpu_pods
from collector.procfs import ProcReader
from collector.roles import RoleEvidence, resolve_role
from collector.shipper import Shipper
from collector.spool import Spool
from collector.window import GpuSource, PodRef, SourceWindow
from collector.workers import Attribution, Worker, attribute_gpus, worker_for_endpoint
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
    pod_lookup: PodLookup | None = None
    procs: ProcReader | None = None
    spool: Spool | None = None
    holder: StateHolder | None = None
    on_records: Callable[[list[Record]], None] | None = None  # e.g. print JSON lines
    errors: Counter[str] = field(default_factory=Counter)
    windows: int = 0
    _workers: dict[str, _WorkerTotals] = field(default_factory=dict)
    _shipper: Shipper | None = None

    def start(self) -> None:
        """Start every source (a GPU source that cannot start raises: the operator asked for it)."""
        for source in self.gpu_sources:
            source.start()
        if self.engines is not None:
            self.errors.update(self.engines.start())

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
                self.errors[f"source_{source.name}"] += 1
        self.errors.update(window.errors)
        deltas: list[EngineDelta] = []
        if self.engines is not None:
            deltas, engine_errors = self.engines.collect()
            self.errors.update(engine_errors)
        attribution = attribute_gpus(
            self.node,
            window.gpu_status,
            pod_holders=self._pod_holders(window),
            pod_lookup=self.pod_lookup,
            procs=self.procs,
            mapping=self.mapping,
        )
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
        engine_records = [self._engine_record(d, attribution) for d in deltas]
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

    def _pod_holders(self, window: SourceWindow) -> dict[str, list[PodRef]] | None:
        if self.pod_resources is None:
            return None
        try:
            pods = self.pod_resources.list()
        except Exception as exc:
            self.errors["pod_resources"] += 1
            log.warning("pod-resources lookup failed: %s", exc)
            return None
        whole_gpus = (s for s in window.gpu_samples if s.parent_gpu_uuid is None)
        index_to_uuid = {str(s.gpu_index): s.gpu_uuid for s in whole_gpus}
        return gpu_pods(pods, index_to_uuid)

    def _engine_record(self, delta: EngineDelta, attribution: Attribution) -> EngineSample:
        reading = delta.reading
        worker: Worker = worker_for_endpoint(reading.url, attribution, self.node, self.mapping)
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
        tp = worker.tp or (len(worker.gpu_uuids) if worker.gpu_uuids else None) or reading.tp_ranks
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
            gpu_uuids=list(worker.gpu_uuids),
            prompt_tokens=delta.prompt_tokens,
            generation_tokens=delta.generation_tokens,
            requests_running=round(reading.running) if reading.running is not None else None,
            requests_waiting=round(reading.waiting) if reading.waiting is not None else None,
            kv_cache_usage=min(1.0, max(0.0, reading.kv_usage)) if reading.kv_usage is not None else None,
            preemptions=delta.preemptions,
            ttft_p50_s=delta.ttft_p50_s,
            ttft_p99_s=delta.ttft_p99_s,
            tpot_p50_s=delta.tpot_p50_s,
            tpot_p99_s=delta.tpot_p99_s,
            cluster=self.cluster,
            deployment=deployment,
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
            self.errors["spool"] += 1
            log.error("could not spool %d records (%s): they are lost", len(records), exc)

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
        errors = Counter(self.errors)
        if self._shipper is not None:
            errors.update(self._shipper.errors)
        self.holder.publish(
            ExporterState(
                node=self.node,
                up=up,
                gpus=tuple(views),
                workers=tuple(workers),
                errors=dict(errors),
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
                self.errors["window"] += 1
        if ship_thread is not None:
            ship_thread.join(timeout=10.0)
