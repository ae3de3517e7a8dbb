"""``phasefit collect``: the per-node collector (a plain command function; the app registers it with
``app.command()(collect)``).  Heavy imports happen inside the command so ``phasefit --help`` stays fast.

``--once`` says what failed: one line per failure on stderr (stage, URL/socket/GPU, status, reason class)
and an exit status (:data:`EXIT_OK` ... :data:`EXIT_SOURCE`, documented in ``--help``)."""

from __future__ import annotations

import contextlib
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from phasefit.cli.output import escape, fail, human

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from rich.console import Console

    from collector.failures import Failure
    from collector.runtime import Runtime
    from collector.settings import CollectorSettings
    from collector.window import GpuSource
    from fleet.clock import Clock, SleepingClock
    from fleet.contract import EngineSample, GpuSample

EXIT_OK = 0  # every source yielded data and every record was delivered
EXIT_CONFIG = 1  # configuration or start-up error (bad value, missing URL, NVML not loadable, port taken)
EXIT_USAGE = 2  # the command line itself is wrong (unknown option): Click's own status
EXIT_SHIP = 3  # --once: shipping failed; the records wait in the spool (or were rejected)
EXIT_SOURCE = 4  # --once: a source yielded nothing (an endpoint, NVML or the pod-resources socket failed)


class SourceName(StrEnum):
    NVML = "nvml"
    DCGM = "dcgm"
    SIM = "sim"


class OutputKind(StrEnum):
    JSON = "json"
    SHIP = "ship"
    NONE = "none"


def _sim_factory(settings: CollectorSettings, clock: Clock) -> GpuSource:
    """The simulated fleet, from the simulator package when this installation has it."""
    try:
        from fleetsim.source import SimSource
    except ImportError as exc:
        raise ValueError("the simulated fleet source (fleetsim.source) is not installed") from exc
    source: GpuSource = SimSource.for_collector(settings, clock)
    return source


def collect(
    *,
    source: Annotated[
        list[SourceName] | None,
        typer.Option("--source", help="GPU telemetry source; repeat to combine (default: nvml)."),
    ] = None,
    dcgm_url: Annotated[
        str | None, typer.Option("--dcgm-url", help="dcgm-exporter /metrics URL (for --source dcgm).")
    ] = None,
    engine_url: Annotated[
        list[str] | None,
        typer.Option("--engine-url", help="A serving engine's /metrics URL (vLLM, SGLang, TRT-LLM); repeat."),
    ] = None,
    interval: Annotated[
        float | None, typer.Option("--interval", min=0.2, help="Window length in seconds (default 10).")
    ] = None,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Collect one window, output it, and exit; failures are listed on stderr and set the exit "
            "status (below).",
        ),
    ] = False,
    output: Annotated[
        OutputKind,
        typer.Option(
            "--output",
            help="json: records as JSON lines on stdout; ship: spool, then send to the ingest API "
            "(PHASEFIT_COLLECTOR_INGEST_URL) or a file (PHASEFIT_COLLECTOR_OUTPUT_FILE);"
            " none: exporter only.",
        ),
    ] = OutputKind.SHIP,
    listen: Annotated[
        str | None, typer.Option("--listen", help="Prometheus exporter address, HOST:PORT or :PORT (:9401).")
    ] = None,
    node: Annotated[
        str | None,
        typer.Option(
            "--node", help="Node name on every record (default: PHASEFIT_COLLECTOR_NODE, $NODE_NAME, host)."
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="Cluster name on every record, part of each worker's pool "
            "(default: PHASEFIT_COLLECTOR_CLUSTER).",
        ),
    ] = None,
) -> None:
    """Collect GPU and serving-engine telemetry on this node: export it to Prometheus and ship it.

    Failures name their stage, target (URL, socket, file or GPU), HTTP status
    and reason class (http_401, connect_refused, timeout, parse_error, ...),
    on stderr and on /metrics: phasefit_collector_errors_total{stage,target,
    reason} and phasefit_collector_target_up{stage,target}.

    Exit status:
    0  every source yielded data and every record was delivered
    1  configuration or start-up error
    2  usage error (unknown option, bad option value)
    3  --once: shipping failed (records left in the spool, or rejected)
    4  --once: a source yielded nothing (dcgm-exporter, an engine, NVML,
       pod-resources: failed or empty)
    When shipping and a source both failed: 3.
    """
    from pydantic import ValidationError

    from collector.nvml_source import NvmlStartError
    from collector.runtime import RuntimeConfigError, build_runtime
    from collector.settings import CollectorSettings
    from fleet.clock import SystemClock

    overrides: dict[str, object] = {}
    if dcgm_url is not None:
        overrides["dcgm_url"] = dcgm_url
    if engine_url:
        overrides["engine_urls"] = engine_url
    if interval is not None:
        overrides["interval_s"] = interval
    if listen is not None:
        overrides["listen"] = listen
    if node is not None:
        overrides["node"] = node
    if cluster is not None:
        overrides["cluster"] = cluster
    try:
        settings = CollectorSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        fail("; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()))
        return
    names = [s.value for s in (source or [SourceName.NVML])]
    clock = SystemClock()
    try:
        runtime = build_runtime(settings, names, output=output.value, clock=clock, sim_factory=_sim_factory)
    except (RuntimeConfigError, ValueError, ImportError) as exc:
        fail(str(exc))
        return
    quiet = _quiet_failure_logs() if once else contextlib.nullcontext()
    try:
        with quiet:
            try:
                runtime.agent.start()
            except NvmlStartError as exc:
                fail(str(exc))
            if once:
                code = _run_once(runtime, clock, settings, output)
                if code != EXIT_OK:
                    raise typer.Exit(code)
            else:
                _run_forever(runtime, settings, output)
    finally:
        runtime.close()


@contextlib.contextmanager
def _quiet_failure_logs() -> Iterator[None]:
    """--once lists every failure once, at the end: the log's warnings of them would repeat each."""
    import logging

    loggers = [logging.getLogger(name) for name in ("collector.failures", "collector.engines")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _run_once(runtime: Runtime, clock: SleepingClock, settings: CollectorSettings, output: OutputKind) -> int:
    """One window, output, and the exit status (``EXIT_*``); every failure is listed on stderr."""
    import sys

    from fleet.contract import dump_record

    primed = [s for s in runtime.agent.gpu_sources if s.name != "sim"] or runtime.agent.engines is not None
    if primed:
        clock.sleep(settings.interval_s)  # one whole window: GPM and engine counters need two samples
    try:
        records = runtime.agent.collect_window()
    except Exception as exc:
        fail(f"the window failed: {type(exc).__name__}: {exc}")
        return EXIT_CONFIG
    console = human()
    if output is OutputKind.JSON:
        sys.stdout.write("".join(dump_record(r) + "\n" for r in records))
        sys.stdout.flush()
    ship_failures: list[Failure] = []
    left = 0
    if output is OutputKind.SHIP and runtime.shipper is not None and runtime.spool is not None:
        drained = runtime.shipper.drain()
        left = runtime.spool.count()
        ship_failures = runtime.shipper.failures.last_failures()
        if runtime.shipper.shipped:
            console.print(f"shipped {runtime.shipper.shipped} records", markup=False)
        if not drained or left:
            where = settings.spool_path
            console.print(
                f"[yellow]could not ship yet:[/] {left} records wait in the spool {escape(str(where))}"
            )
    from collector.failures import STAGE_SPOOL

    current = runtime.agent.failures.current()
    source_failures = [f for f in current if f.stage != STAGE_SPOOL and not f.partial]
    ship_failures += [f for f in current if f.stage == STAGE_SPOOL]
    for failure in current:
        if failure.partial:
            _say(console, "warning", failure)
    for failure in [*source_failures, *ship_failures]:
        _say(console, "error", failure)
    console.print(f"collected {len(records)} records")
    if ship_failures or left:
        return EXIT_SHIP
    if source_failures:
        return EXIT_SOURCE
    return EXIT_OK


def _say(console: Console, level: str, failure: Failure) -> None:
    colour = "bold red" if level == "error" else "yellow"
    console.print(f"[{colour}]{level}:[/] {escape(failure.describe())}", soft_wrap=True)


def _run_forever(runtime: Runtime, settings: CollectorSettings, output: OutputKind) -> None:
    import signal
    import sys
    import threading

    from collector.exporter import build_registry, serve
    from collector.settings import parse_listen
    from fleet.contract import dump_record

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    host, port = parse_listen(settings.listen)
    try:
        server, _ = serve(build_registry(runtime.holder, settings.max_series_per_family), host, port)
    except OSError as exc:
        fail(f"cannot serve /metrics on {settings.listen}: {exc.strerror or exc}")
        return
    where = f"/metrics on {settings.listen}, {settings.interval_s} s windows"
    human().print(f"phasefit collector on {settings.node}: {where}", markup=False)
    if output is OutputKind.JSON:

        def print_records(records: Sequence[GpuSample | EngineSample]) -> None:
            sys.stdout.write("".join(dump_record(r) + "\n" for r in records))
            sys.stdout.flush()

        runtime.agent.on_records = print_records
    try:
        runtime.agent.run(stop, settings.interval_s, runtime.shipper)
    finally:
        server.shutdown()
        if runtime.shipper is not None:
            runtime.shipper.drain(max_attempts=20)  # a last try; what is left stays in the spool
