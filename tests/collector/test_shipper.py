"""Shipping to the ingest API through httpx.MockTransport, with an injected clock."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from collector.agent import Agent
from collector.fake_nvml import Load, fleet_node
from collector.nvml_source import NvmlSource
from collector.shipper import FileSink, HttpSink, Shipper, parse_retry_after
from collector.spool import DROP_REJECTED, DROP_SPOOL_FULL, Spool
from fleet.clock import FakeClock
from fleet.contract import parse_record

Handler = Callable[[httpx.Request], httpx.Response]


class Ingest:
    """A fake ingest API: records what it stored, answers what the test scripts."""

    def __init__(self) -> None:
        self.stored: list[dict[str, object]] = []
        self.requests: list[httpx.Request] = []
        self.script: list[Callable[[httpx.Request], httpx.Response]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.script:
            return self.script.pop(0)(request)
        return self.accept(request)

    def body(self, request: httpx.Request) -> list[dict[str, object]]:
        raw = request.content
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        records: list[dict[str, object]] = json.loads(raw)["records"]
        return records

    def accept(self, request: httpx.Request) -> httpx.Response:
        records = self.body(request)
        self.stored.extend(records)
        return httpx.Response(200, json={"accepted": len(records), "stored": len(records), "duplicates": 0})


def payloads(count: int, start: int = 0) -> list[bytes]:
    return [json.dumps({"n": n}).encode() for n in range(start, start + count)]


def make(tmp_path: Path, ingest: Ingest, clock: FakeClock, **kwargs: object) -> tuple[Spool, Shipper]:
    spool = Spool(tmp_path / "spool.sqlite", max_bytes=int(kwargs.pop("max_bytes", 10**8)), fsync=False)  # type: ignore[call-overload]
    client = httpx.Client(transport=httpx.MockTransport(ingest))
    sink = HttpSink(client, "http://ingest.local/", "s3cret", clock)
    shipper = Shipper(spool, sink, clock, rng=random.Random(7), **kwargs)  # type: ignore[arg-type]
    return spool, shipper


def test_gzip_bearer_and_ack(tmp_path: Path, clock: FakeClock) -> None:
    ingest = Ingest()
    spool, shipper = make(tmp_path, ingest, clock, batch_max_records=4)
    spool.append(payloads(10))
    while shipper.step():
        pass
    assert [r["n"] for r in ingest.stored] == list(range(10))
    request = ingest.requests[0]
    assert request.url == "http://ingest.local/v1/ingest" and request.method == "POST"
    assert (
        request.headers["Authorization"] == "Bearer s3cret" and request.headers["Content-Encoding"] == "gzip"
    )
    assert len(ingest.requests) == 3 and spool.count() == 0 and shipper.shipped == 10


def test_429_retry_after_is_honoured(tmp_path: Path, clock: FakeClock) -> None:
    ingest = Ingest()
    ingest.script = [lambda r: httpx.Response(429, headers={"Retry-After": "120"})]
    spool, shipper = make(tmp_path, ingest, clock)
    spool.append(payloads(3))
    assert not shipper.step()
    wait = shipper.next_attempt_at - clock.monotonic()
    assert 120.0 <= wait <= 132.0
    clock.advance(100.0)
    assert not shipper.step() and len(ingest.requests) == 1  # not before Retry-After
    clock.advance(40.0)
    assert shipper.step() and spool.count() == 0


def test_503_and_network_errors_back_off_exponentially_with_jitter_and_keep_everything(
    tmp_path: Path, clock: FakeClock
) -> None:
    ingest = Ingest()

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    ingest.script = [lambda r: httpx.Response(503)] * 4 + [refuse] * 4
    spool, shipper = make(tmp_path, ingest, clock, backoff_min_s=1.0, backoff_max_s=8.0)
    spool.append(payloads(2))
    delays = []
    for _ in range(8):
        assert not shipper.step()
        delays.append(shipper.next_attempt_at - clock.monotonic())
        clock.advance(delays[-1])
    assert all(0.5 <= d <= 8.0 for d in delays)
    assert delays[3] > delays[0] and max(delays) <= 8.0 and delays[-1] >= 4.0
    assert shipper.step() and [r["n"] for r in ingest.stored] == [0, 1]
    assert shipper.errors["ship"] == 8


def test_retry_after_as_http_date() -> None:
    clock = FakeClock()
    assert parse_retry_after("Mon, 02 Mar 2026 12:01:00 GMT", clock.now()) == pytest.approx(60.0)
    assert parse_retry_after("soon", clock.now()) is None and parse_retry_after(None, clock.now()) is None


def test_413_splits_the_batch(tmp_path: Path, clock: FakeClock) -> None:
    ingest = Ingest()

    def limited(request: httpx.Request) -> httpx.Response:
        if len(ingest.body(request)) > 3:
            return httpx.Response(413)
        return ingest.accept(request)

    ingest.script = [limited] * 20
    spool, shipper = make(tmp_path, ingest, clock, batch_max_records=16)
    spool.append(payloads(10))
    for _ in range(20):
        shipper.step()
    assert [r["n"] for r in ingest.stored] == list(range(10)) and spool.count() == 0


@pytest.mark.parametrize("status", [422, 409])
def test_422_and_409_reject_only_the_named_records(tmp_path: Path, clock: FakeClock, status: int) -> None:
    """422: invalid records; 409: keys stored with other content. Either way the rest are resent."""
    ingest = Ingest()
    detail = {"detail": [{"index": 1, "field": "ts", "message": "no time zone"}]}
    ingest.script = [lambda r: httpx.Response(status, json=detail)]
    spool, shipper = make(tmp_path, ingest, clock)
    spool.append(payloads(3))
    shipper.step()
    shipper.step()
    assert [r["n"] for r in ingest.stored] == [0, 2]
    assert spool.dropped()[DROP_REJECTED] == 1 and spool.count() == 0


def test_other_4xx_is_dropped_and_counted_but_auth_errors_keep_the_data(
    tmp_path: Path, clock: FakeClock
) -> None:
    ingest = Ingest()
    ingest.script = [lambda r: httpx.Response(400, text="bad"), lambda r: httpx.Response(401)]
    spool, shipper = make(tmp_path, ingest, clock)
    spool.append(payloads(2))
    shipper.step()
    assert spool.count() == 0 and spool.dropped()[DROP_REJECTED] == 2
    spool.append(payloads(2, start=2))
    assert not shipper.step()
    assert spool.count() == 2 and shipper.errors["ship"] == 2
    counts = shipper.failures.counts()
    assert counts == {("ship", "http://ingest.local/v1/ingest", "rejected"): 1,
                      ("ship", "http://ingest.local/v1/ingest", "http_401"): 1}  # fmt: skip
    [current] = shipper.failures.current()
    assert current.status == 401 and "refused the token" in current.detail
    clock.advance(60.0)
    assert shipper.step() and [r["n"] for r in ingest.stored] == [2, 3]


def test_file_sink(tmp_path: Path, clock: FakeClock) -> None:
    spool = Spool(tmp_path / "s.sqlite", max_bytes=10**6, fsync=False)
    out = tmp_path / "out" / "records.jsonl"
    shipper = Shipper(spool, FileSink(out), clock)
    spool.append(payloads(3))
    assert shipper.step()
    assert [json.loads(line)["n"] for line in out.read_text().splitlines()] == [0, 1, 2]


def outage_run(
    tmp_path: Path, max_bytes: int
) -> tuple[list[dict[str, object]], list[dict[str, object]], Spool]:
    """One hour of 10-second windows from 8 fake GPUs while the service is down, then recovery."""
    clock = FakeClock()
    fake = fleet_node(8, clock.monotonic, load=Load(sm_util=60, tensor_util=50, dram_bw_util=40))
    source = NvmlSource(fake, "node-a", clock)
    ingest = Ingest()
    down = {"until": clock.monotonic() + 3600.0}

    def service(request: httpx.Request) -> httpx.Response:
        ingest.requests.append(request)
        if clock.monotonic() < down["until"]:
            if len(ingest.requests) % 2:
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(503, headers={"Retry-After": "30"})
        return ingest.accept(request)

    spool = Spool(tmp_path / "spool.sqlite", max_bytes=max_bytes, fsync=False)
    client = httpx.Client(transport=httpx.MockTransport(service))
    shipper = Shipper(
        spool, HttpSink(client, "http://ingest.local", None, clock), clock, rng=random.Random(1)
    )
    agent = Agent(node="node-a", clock=clock, gpu_sources=[source], spool=spool)
    agent.start()
    produced: list[dict[str, object]] = []
    for _ in range(360 + 12):  # an hour down, two minutes up
        clock.advance(10.0)
        produced.extend(r.model_dump(mode="json") for r in agent.collect_window())
        while shipper.step():
            pass
    agent.close()
    return produced, ingest.stored, spool


def test_service_down_for_an_hour_loses_nothing_within_the_spool_bound(tmp_path: Path) -> None:
    produced, stored, spool = outage_run(tmp_path, max_bytes=64 * 1024 * 1024)
    assert len(produced) == 372 * 8
    assert stored == produced  # everything, once, in order
    assert spool.count() == 0 and spool.dropped()[DROP_SPOOL_FULL] == 0
    assert parse_record(json.dumps(stored[0])).gpu_uuid  # type: ignore[union-attr]


def test_outage_beyond_the_spool_bound_drops_oldest_and_counts_exactly(tmp_path: Path) -> None:
    produced, stored, spool = outage_run(tmp_path, max_bytes=200 * 1024)
    dropped = spool.dropped()[DROP_SPOOL_FULL]
    assert dropped > 0
    assert stored == produced[dropped:]  # the oldest went, the rest arrived in order
