"""How an exporter's value is written, and so how a reader converts it to the data contract's units.

The values are the spellings the collector's dcgm source has always used, so a reader may compare them as
plain strings.
"""

from __future__ import annotations

from enum import StrEnum


class Unit(StrEnum):
    RATIO = "ratio"  # 0..1 as is
    PERCENT = "percent"  # 0..100 -> 0..1
    # DCGM 4.6 renamed GPU_UTIL to GPU_UTIL_RATIO without documenting its scale: a value > 1 is a percent.
    RATIO_OR_PERCENT = "ratio_or_percent"
    MIB = "mib"  # MiB -> bytes
    WATTS = "watts"
    MHZ = "mhz"
    BYTES_PER_S = "rate"  # a per-second rate of bytes -> bytes in the window
    COUNT = "count"  # requests or tokens (a gauge's level, or a counter's increase)
    SECONDS = "seconds"  # histogram observations (latencies)
    CODE = "code"  # an enumerated value (the last Xid)


class Kind(StrEnum):
    """How a metric evolves, so how a reader turns it into one window's value."""

    COUNTER = "counter"  # cumulative: the increase over the window
    GAUGE = "gauge"  # a level: its mean (zero-agent) or last value (collector) in the window
    HISTOGRAM = "histogram"  # buckets: quantiles of the window's observations
