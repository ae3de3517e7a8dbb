"""Assembles an :class:`~collector.agent.Agent` from settings: sources, attribution helpers, spool, shipper.

The CLI calls :func:`build_runtime`; tests pass their own NVML (the fake), HTTP client (``MockTransport``)
and clock.  Nothing here runs at import time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from collector.agent import Agent
from collector.dcgm_source import DcgmSource
from collector.engines import EngineScraper
from collector.exporter import ExporterState, StateHolder
from collector.mapping import RoleMapping, load_mapping
from collector.nvml_api import NvmlApi, load_pynvml
from collector.nvml_source import NvmlSource
from collector.podresources import KubernetesPodLookup, PodResourcesClient
from collector.procfs import ProcFs
from collector.settings import CollectorSettings
from collector.shipper import FileSink, HttpSink, Shipper, Sink
from collector.spool import Spool
from collector.window import GpuSource
from fleet.clock import Clock

SOURCES = ("nvml", "dcgm", "sim")


class RuntimeConfigError(ValueError):
    """The requested combination of sources and outputs cannot run with these settings."""


@dataclass
class Runtime:
    agent: Agent
    holder: StateHolder
    shipper: Shipper | None = None
    spool: Spool | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        self.agent.close()
        for closer in reversed(self.closers):
            closer()


def default_sku_of() -> Callable[[str], str]:
    """SKU keys from the shared GPU catalog (unknown names resolve to "unknown", with a warning)."""
    from fleet.catalog import load_catalog
    from fleet.settings import Settings

    gpus = load_catalog(Settings().catalog_path).gpus
    cache: dict[str, str] = {}

    def sku_of(name: str) -> str:
        if name not in cache:
            cache[name] = gpus.resolve(name).key
        return cache[name]

    return sku_of


def make_sink(settings: CollectorSettings, client: httpx.Client, clock: Clock) -> Sink:
    if settings.ingest_url:
        return HttpSink(client, settings.ingest_url, settings.read_token(), clock)
    if settings.output_file is not None:
        return FileSink(settings.output_file)
    raise RuntimeConfigError(
        "--output ship needs a destination: set PHASEFIT_COLLECTOR_INGEST_URL (the phasefit service) or "
        "PHASEFIT_COLLECTOR_OUTPUT_FILE (a JSONL file), or choose --output json / none"
    )


def build_runtime(
    settings: CollectorSettings,
    sources: Sequence[str],
    *,
    output: str,
    clock: Clock,
    nvml_api: NvmlApi | None = None,
    http: httpx.Client | None = None,
    sim_factory: Callable[[CollectorSettings, Clock], GpuSource] | None = None,
    sku_of: Callable[[str], str] | None = None,
) -> Runtime:
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        raise RuntimeConfigError(f"unknown source(s) {unknown}: choose from {list(SOURCES)}")
    client = http or httpx.Client(timeout=settings.request_timeout_s, follow_redirects=False)
    closers: list[Callable[[], None]] = [] if http is not None else [client.close]
    gpu_sources: list[GpuSource] = []
    for name in dict.fromkeys(sources):
        if name == "nvml":
            api = nvml_api or load_pynvml()
            timeout_s = settings.nvml_call_timeout_s
            gpu_sources.append(NvmlSource(api, settings.node, clock, call_timeout_s=timeout_s))
        elif name == "dcgm":
            if not settings.dcgm_url:
                raise RuntimeConfigError("--source dcgm needs --dcgm-url (or PHASEFIT_COLLECTOR_DCGM_URL)")
            dcgm = DcgmSource(settings.dcgm_url, settings.node, client, clock)
            dcgm.timeout_s, dcgm.default_window_s = settings.scrape_timeout_s, settings.interval_s
            gpu_sources.append(dcgm)
        else:
            if sim_factory is None:
                raise RuntimeConfigError("the simulated fleet source is not available in this installation")
            gpu_sources.append(sim_factory(settings, clock))
    discover = settings.discover_engines and settings.pod_resources_socket is not None
    engines = (
        EngineScraper(list(settings.engine_urls), client, clock, settings.scrape_timeout_s)
        if settings.engine_urls or discover
        else None
    )
    mapping: RoleMapping | None = None
    if settings.role_mapping_file is not None:
        mapping = load_mapping(settings.role_mapping_file)
    pod_resources = None
    pod_lookup = None
    if settings.pod_resources_socket is not None:
        pod_resources = PodResourcesClient(settings.pod_resources_socket, settings.scrape_timeout_s)
        closers.append(pod_resources.close)
        pod_lookup = KubernetesPodLookup()
    spool = None
    shipper = None
    if output == "ship":
        sink = make_sink(settings, client, clock)
        spool = Spool(settings.spool_path, settings.spool_max_bytes, fsync=settings.spool_fsync)
        closers.append(spool.close)
        shipper = Shipper(
            spool,
            sink,
            clock,
            rng=random.Random(),
            backoff_min_s=settings.backoff_min_s,
            backoff_max_s=settings.backoff_max_s,
            batch_max_records=settings.batch_max_records,
            batch_max_bytes=settings.batch_max_bytes,
        )
    holder = StateHolder(ExporterState(node=settings.node))
    # command lines, parents and listening sockets: the host's processes behind GPUs and engine ports
    procfs = ProcFs(settings.proc_root)
    agent = Agent(
        node=settings.node,
        clock=clock,
        cluster=settings.cluster,
        gpu_sources=gpu_sources,
        engines=engines,
        discover_engines=discover,
        configured_engine_urls=tuple(settings.engine_urls),
        sku_of=sku_of or default_sku_of(),
        mapping=mapping,
        role_label_key=settings.role_label_key,
        pod_resources=pod_resources,
        pod_resources_target=str(settings.pod_resources_socket or "pod-resources"),
        pod_lookup=pod_lookup,
        procs=procfs,
        sockets=procfs,
        spool=spool,
        holder=holder,
    )
    return Runtime(agent=agent, holder=holder, shipper=shipper, spool=spool, closers=closers)
