"""Issue 16: every input yields 2xx or a 4xx naming the field, on SQLite and PostgreSQL (``store_engine``).

The corpus (:data:`CORPUS`): numbers sent as strings or booleans, bare-number timestamps, years 1 and 9999
(with offsets that cross the calendar's edge), ``window_s`` 1e308, bidi and invisible characters in names,
timestamps outside the service's window, wrong Content-Types, repeated JSON keys, calendar-edge ``from`` /
``to`` / ``since`` and steps on the query API, and calendar-edge Alertmanager times. Each case is sent to
a fresh app; a refusal must name what it refuses and store nothing, an acceptance must store. docs/security.md
has the before/after of each as an attack table row.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import Engine, text

from fleet.store.alerts import list_alert_events
from tests.phasefit.service.conftest import ALERTMANAGER, INGEST_A, READ, ClientFactory, auth
from tests.phasefit.service.records import body, engine, gpu
from tests.phasefit.service.test_alerts import FIRING

JSON = "application/json"


@dataclass(frozen=True)
class Case:
    """One bad (or edge) input: what is sent, the status expected, and what the answer must name."""

    name: str
    method: str
    path: str
    status: int
    names: str  # ingest "INDEX:FIELD"; query "LOCATION.PARAMETER"; Alertmanager the field path; 415 the type
    content: bytes | None = None
    params: dict[str, str] = field(default_factory=dict)
    content_type: str | None = JSON
    token: str = INGEST_A


def ingest(name: str, records: list[Any], names: str, status: int = 422) -> Case:
    return Case(name, "POST", "/v1/ingest", status, names, content=body(records))


def raw_ingest(
    name: str, content: bytes, names: str, status: int = 422, content_type: str | None = JSON
) -> Case:
    return Case(name, "POST", "/v1/ingest", status, names, content=content, content_type=content_type)


def query(name: str, path: str, params: dict[str, str], names: str, status: int = 422) -> Case:
    return Case(name, "GET", path, status, names, params=params, token=READ)


def alert(name: str, names: str, http: int = 422, **fields: Any) -> Case:
    payload = copy.deepcopy(FIRING)
    payload["alerts"][0].update(fields)
    return Case(
        name, "POST", "/v1/alerts/alertmanager", http, names, content=json.dumps(payload).encode(),
        token=ALERTMANAGER,
    )  # fmt: skip


GOOD = json.dumps({"records": [gpu(0, 0)]}).encode()
YEAR_1 = "0001-01-01T00:00:00+05:00"  # 5 h before the calendar starts, in UTC
YEAR_9999 = "9999-12-31T23:59:59-05:00"  # 5 h after it ends
SAMPLES = "/v1/workers/worker-0/samples"
REPEATED = b'"sm_active": 0.5, "sm_active": 0.9'
SPACED = b'"sm_active" : 0.5, "sm_active": 0.9'  # not provable by counting: Python's json finds it
ESCAPED = b'"sm_active": 0.5, "sm_\\u0061ctive": 0.9'  # the same key, one letter escaped
SAME = {"from": "2026-03-02T12:00:00Z", "to": "2026-03-02T12:00:00Z"}

CORPUS = [
    # numbers are JSON numbers, bounded
    ingest("ratio as a string", [gpu(0, 0, sm_active="0.5")], "0:sm_active"),
    ingest("ratio as a boolean", [gpu(0, 0, sm_active=True)], "0:sm_active"),
    ingest("index as a boolean", [gpu(0, 0, gpu_index=True)], "0:gpu_index"),
    ingest("count as a string", [engine(0, 0, prompt_tokens="1000")], "0:prompt_tokens"),
    ingest("window_s 1e308", [gpu(0, 0, window_s=1e308)], "0:window_s"),
    raw_ingest("NaN ratio", GOOD.replace(b'"sm_active": 0.5', b'"sm_active": NaN'), "0:sm_active"),
    # timestamps are RFC 3339 strings inside the contract's years and the service's window
    ingest("bare-number ts", [gpu(0, 0, ts=1772452800)], "0:ts"),
    ingest("ts in year 1 (+05:00)", [gpu(0, 0, ts=YEAR_1)], "0:ts"),
    ingest("ts in year 9999 (-05:00)", [gpu(0, 0, ts=YEAR_9999)], "0:ts"),
    ingest("ts older than the ingest window", [gpu(0, 0, ts="2026-02-01T00:00:00Z")], "0:ts"),
    ingest("ts 2 h ahead of the service's clock", [gpu(0, 0, ts="2026-03-02T15:00:00Z")], "0:ts"),
    ingest("ts without a time zone", [gpu(0, 0, ts="2026-03-02T12:00:00")], "0:ts"),
    # names without control, invisible or direction-changing characters
    ingest("bidi override in a node name", [gpu(0, 0, node="node-\u202e0")], "0:node"),
    ingest("zero-width space in a GPU UUID", [gpu(0, 0, gpu_uuid="GPU-\u200b0000")], "0:gpu_uuid"),
    ingest("BOM in a model name", [engine(0, 0, model="\ufeffmeta-llama/x")], "0:model"),
    ingest("NUL in a worker id", [gpu(0, 0, worker_id="worker\x000")], "0:worker_id"),
    # the body: JSON, each key once
    raw_ingest("Content-Type text/plain", GOOD, JSON, status=415, content_type="text/plain"),
    raw_ingest("no Content-Type", GOOD, JSON, status=415, content_type=None),
    raw_ingest("charset latin-1", GOOD, JSON, status=415, content_type="application/json; charset=latin-1"),
    raw_ingest("charset utf-8 is fine", GOOD, "", status=200, content_type="Application/JSON; charset=UTF-8"),
    raw_ingest("repeated key in a record", GOOD.replace(b'"sm_active": 0.5', REPEATED), "0:sm_active"),
    raw_ingest("repeated key with a spaced colon", GOOD.replace(b'"sm_active": 0.5', SPACED), "0:sm_active"),
    raw_ingest("repeated key behind an escape", GOOD.replace(b'"sm_active": 0.5', ESCAPED), "0:sm_active"),
    raw_ingest("repeated key in the envelope", b'{"records": [], "records": ' + GOOD[12:], "-:records"),
    raw_ingest("nesting 100,000 deep", b'{"records": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "-:-"),
    ingest("no kind", [{k: v for k, v in gpu(0, 0).items() if k != "kind"}], "0:kind"),
    # the query API: instants of the years 1970-2099, steps of one second to about three centuries
    *(
        query(f"{param}={value} on {path}", path, {param: value}, f"query.{param}")
        for path in ("/v1/findings", "/v1/lost-tokens", SAMPLES)
        for param in ("from", "to")
        for value in (YEAR_1, YEAR_9999, "1e308", "-1")
    ),
    query("since in year 9999 on /v1/fleet", "/v1/fleet", {"since": YEAR_9999}, "query.since"),
    query("from = to", "/v1/findings", SAME, "query.from"),
    query("step 0", "/v1/lost-tokens", {"step": "0"}, "query.step"),
    query("step of 10^30 days", SAMPLES, {"step": "1" + "0" * 30 + "d"}, "query.step"),
    query("NUL in a query", "/v1/workers", {"model": "a\x00b"}, "query.model"),
    query("week 0000-W01", "/v1/reports/0000-W01", {}, "path.week"),
    query("week 53 of a 52-week year", "/v1/reports/2021-W53", {}, "2021-W53", status=404),
    # Alertmanager: times of the years 2000-2099, endsAt 0001-01-01T00:00:00Z meaning "still firing"
    alert("startsAt in year 1 (+05:00)", "alerts.0.startsAt", startsAt=YEAR_1),
    alert("startsAt in year 9999 (-05:00)", "alerts.0.startsAt", startsAt=YEAR_9999),
    alert("startsAt as a number", "alerts.0.startsAt", startsAt=1772452800),
    alert("endsAt in year 1 (+05:00)", "alerts.0.endsAt", endsAt=YEAR_1),
    alert("endsAt in year 9999", "alerts.0.endsAt", status="resolved", endsAt="9999-12-31T23:59:59Z"),
    alert("endsAt 0001-01-01T00:00:00Z while firing", "", http=200, endsAt="0001-01-01T00:00:00Z"),
    Case(
        "truncatedAlerts as a boolean",
        "POST",
        "/v1/alerts/alertmanager",
        422,
        "truncatedAlerts",
        content=json.dumps({**FIRING, "truncatedAlerts": True}).encode(),
        token=ALERTMANAGER,
    ),
    Case(
        "repeated key in a notification",
        "POST",
        "/v1/alerts/alertmanager",
        422,
        "version",
        content=json.dumps(FIRING)[:-1].encode() + b', "version": "4"}',
        token=ALERTMANAGER,
    ),
    Case(
        "notification as text/plain",
        "POST",
        "/v1/alerts/alertmanager",
        415,
        JSON,
        content=json.dumps(FIRING).encode(),
        content_type="text/plain",
        token=ALERTMANAGER,
    ),
]


def send(client: Any, case: Case) -> Any:
    """The request as the case says, Content-Type included or left out (the test client sends JSON's)."""
    request = client.build_request(
        case.method, case.path, content=case.content, params=case.params, headers=auth(case.token)
    )
    if case.content_type is None:
        request.headers.pop("content-type", None)
    else:
        request.headers["content-type"] = case.content_type
    return client.send(request)


def named(answer: Any, case: Case) -> bool:
    """Whether the answer names what the case expects it to."""
    detail = answer.json()["detail"]
    if case.path == "/v1/ingest" and answer.status_code == 422:
        index, _, where = case.names.partition(":")
        wanted = (None if index == "-" else int(index), None if where == "-" else where)
        return any((e["index"], e["field"]) == wanted for e in detail)
    if isinstance(detail, list):  # FastAPI's validation errors
        location = tuple(case.names.split("."))
        return any(tuple(e["loc"]) == location for e in detail)
    return case.names in detail


def stored(engine_: Engine) -> dict[str, int]:
    with engine_.connect() as connection:
        return {
            table: int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
            for table in ("gpu_samples", "engine_samples", "gpus", "workers", "alert_events")
        }


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_every_input_is_2xx_or_a_4xx_naming_the_field(
    make_client: ClientFactory, store_engine: Engine, case: Case
) -> None:
    client = make_client(engine=store_engine, read_access="token")
    before = stored(store_engine)
    answer = send(client, case)
    assert answer.status_code == case.status, answer.text
    after = stored(store_engine)
    if case.status >= 400:
        assert named(answer, case), answer.text
        assert after == before  # a refusal stores nothing
    elif case.method == "POST":
        assert after != before  # an acceptance stores
    if case.name.startswith("endsAt 0001-01-01"):
        with store_engine.connect() as connection:
            [event] = list_alert_events(connection)
        assert event.event.status == "firing" and event.event.ends_at is None  # still firing


def test_the_corpus_covers_what_issue_16_lists() -> None:
    names = " | ".join(case.name for case in CORPUS)
    topics = ["as a string", "as a boolean", "bare-number ts", "year 1", "year 9999", "window_s 1e308"]
    topics += ["bidi", "zero-width", "Content-Type", "repeated key", "from=", "to=", "startsAt", "endsAt"]
    for topic in topics:
        assert topic in names, topic
