"""Tiny HTTP servers on loopback for tests: a static exposition Prometheus scrapes, a webhook sink.

Each runs ``ThreadingHTTPServer`` in a daemon thread on a free port of 127.0.0.1 and stops on exit of
its ``with`` block. The end-to-end test of the alert path swaps them for phasefit's own exporter and
webhook receiver; the Prometheus/Alertmanager side (:mod:`alerts.testing`) stays the same.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

Exposition = Callable[[], str]


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name=type(self).__name__, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class ExpositionServer(_Server):
    """Serves Prometheus text exposition, one callable per path (called on every scrape).

    >>> with ExpositionServer({"/metrics": lambda: "up_example 1\\n"}) as server:
    ...     server.url("/metrics")  # doctest: +SKIP
    """

    def __init__(self, paths: Mapping[str, Exposition]) -> None:
        self.paths: dict[str, Exposition] = dict(paths)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                render = owner.paths.get(self.path.split("?", 1)[0])
                if render is None:
                    self.send_error(404)
                    return
                body = render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        super().__init__(Handler)


@dataclass(frozen=True)
class Delivery:
    """One request the sink received."""

    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON


class WebhookSink(_Server):
    """Records JSON POSTs (an Alertmanager webhook receiver stand-in) and answers 200."""

    def __init__(self) -> None:
        self._deliveries: list[Delivery] = []
        self._changed = threading.Condition()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self.send_error(400, "body is not JSON")
                    return
                owner._record(Delivery(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        super().__init__(Handler)

    def _record(self, delivery: Delivery) -> None:
        with self._changed:
            self._deliveries.append(delivery)
            self._changed.notify_all()

    @property
    def deliveries(self) -> list[Delivery]:
        with self._changed:
            return list(self._deliveries)

    def wait_for(self, predicate: Callable[[Delivery], bool], timeout_s: float) -> Delivery:
        """The first delivery (past or future) matching ``predicate``; ``TimeoutError`` naming what came."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for delivery in self._deliveries:
                    if predicate(delivery):
                        return delivery
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [
                        (d.path, d.body.get("status") if isinstance(d.body, dict) else None)
                        for d in self._deliveries
                    ]
                    raise TimeoutError(f"no matching delivery within {timeout_s}s; received {seen}")
                self._changed.wait(left)
