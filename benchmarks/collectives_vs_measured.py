"""The communication model against NVIDIA AI Configurator's measured collectives (data/measured).

The table: data/measured/collectives.csv.

For every all-reduce and all-to-all AIC 0.12.0 measured on H100 SXM and H200 SXM (each engine's custom
all-reduce kernel, in and out of a CUDA graph, and NCCL 2.29.2; ``data/measured/collectives.csv``,
written by ``scripts/measured_collectives.py``) predicts the same call with the calibrated parameters
the analyzer uses (``analyzer.model.collectives`` with the catalog's NVLink figure x
``CALIBRATED.allreduce_bandwidth_efficiency`` and ``CALIBRATED.allreduce_peer_latency_s`` per peer),
then prints the median and p90 of |predicted / measured - 1| per implementation, GPU count and message band:

  - ``decode``: up to 8M elements, what a decode step of up to 512 sequences of a model with a hidden size
    up to 16,384 sends per all-reduce;
  - ``prefill``: larger messages (prefill chunks).

Next to it, in the same run, the previous model (a ring whose 2(n-1) steps each cost a fitted 15.07 us hop
latency, at the old fitted 0.508 of the link) as the baseline. Nothing is fitted here.

    .venv/bin/python benchmarks/collectives_vs_measured.py
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.model.collectives import Link, all_to_all_seconds, allreduce_seconds
from analyzer.model.efficiency import CALIBRATED, EfficiencyParams
from fleet.catalog import load_catalog

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TABLE = REPO / "data" / "measured" / "collectives.csv"
DECODE_MAX_ELEMENTS = 8 * 1024 * 1024
# The previous model's fitted constants (efficiency.py before the collectives module), the baseline.
PREVIOUS_HOP_LATENCY_S = 15.0704e-6
PREVIOUS_BANDWIDTH_EFFICIENCY = 0.507836


@dataclass(frozen=True)
class Call:
    implementation: str
    sku: str
    op: str
    gpus: int
    elements: int
    element_bytes: int
    latency_s: float

    @property
    def message_bytes(self) -> float:
        return float(self.elements * self.element_bytes)

    @property
    def band(self) -> str:
        return "decode" if self.elements <= DECODE_MAX_ELEMENTS else "prefill"


def load_calls(path: Path) -> list[Call]:
    text = "".join(
        line for line in path.read_text(encoding="utf-8").splitlines(True) if not line.startswith("#")
    )
    return [
        Call(
            r["implementation"],
            r["sku"],
            r["op"],
            int(r["gpus"]),
            int(r["elements"]),
            int(r["element_bytes"]),
            float(r["latency_s"]),
        )
        for r in csv.DictReader(io.StringIO(text))
    ]


def predict(call: Call, link: Link) -> float:
    """The model's seconds for the call: an all-reduce of the message, or an all-to-all in which each GPU
    sends the (n-1)/n of its buffer that belongs to its peers."""
    if call.op == "all_reduce":
        return allreduce_seconds(call.gpus, call.message_bytes, link)
    return all_to_all_seconds(call.gpus, call.message_bytes * (call.gpus - 1) / call.gpus, link)


def previous_model(call: Call, link_bytes_per_s: float) -> float:
    """The baseline: a ring all-reduce with a per-step hop latency (all-to-all: one hop per peer)."""
    n = call.gpus
    link = link_bytes_per_s * PREVIOUS_BANDWIDTH_EFFICIENCY
    if call.op == "all_reduce":
        return 2 * (n - 1) * PREVIOUS_HOP_LATENCY_S + 2 * (n - 1) / n * call.message_bytes / link
    return (n - 1) * PREVIOUS_HOP_LATENCY_S + call.message_bytes * (n - 1) / n / link


def _errors(calls: Sequence[Call], model: Callable[[Call], float]) -> tuple[int, float, float, float]:
    errors = sorted(abs(model(c) / c.latency_s - 1) for c in calls)
    ratios = [model(c) / c.latency_s for c in calls]
    p90 = errors[min(len(errors) - 1, round(0.9 * (len(errors) - 1)))]
    return len(errors), statistics.median(errors), p90, statistics.median(ratios)


def report(calls: Sequence[Call], params: EfficiencyParams = CALIBRATED) -> list[str]:
    catalog = load_catalog()
    raw_link = {}
    for sku in {c.sku for c in calls}:
        figure = catalog.gpus.get(sku).interconnect_bytes_per_s
        if figure is None:
            raise ValueError(f"the catalog has no interconnect figure for {sku}")
        raw_link[sku] = figure

    def ours(c: Call) -> float:
        return predict(
            c, Link(raw_link[c.sku] * params.allreduce_bandwidth_efficiency, params.allreduce_peer_latency_s)
        )

    def before(c: Call) -> float:
        return previous_model(c, raw_link[c.sku])

    groups: dict[tuple[str, str, str, str], list[Call]] = defaultdict(list)
    for c in calls:
        for gpus in (str(c.gpus), "all"):
            groups[(c.op, c.implementation, gpus, c.band)].append(c)
            groups[(c.op, "all", gpus, c.band)].append(c)
    lines = [
        "| op | implementation | GPUs | band | calls | abs. median | abs. p90 | pred./meas. median "
        "| previous model: abs. median | abs. p90 | pred./meas. median |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(groups, key=lambda k: (k[0], k[1] == "all", k[1], k[2] == "all", k[2], k[3])):
        n, median, p90, bias = _errors(groups[key], ours)
        _, b_median, b_p90, b_bias = _errors(groups[key], before)
        lines.append(
            f"| {' | '.join(key)} | {n} | {median:.1%} | {p90:.1%} | {bias:.2f} | {b_median:.1%} | "
            f"{b_p90:.1%} | {b_bias:.2f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--table", type=Path, default=DEFAULT_TABLE)
    args = parser.parse_args(argv)
    calls = load_calls(args.table)
    print(
        f"{len(calls)} measured calls; latency {CALIBRATED.allreduce_peer_latency_s * 1e6:.1f} us per peer, "
        f"{CALIBRATED.allreduce_bandwidth_efficiency:.3f} of the catalog's NVLink figure "
        "(fitted on published end-to-end rows only)\n"
    )
    print("\n".join(report(calls)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
