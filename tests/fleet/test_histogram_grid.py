"""The grid module ingest uses: no numpy until a histogram's bounds lie off the grid."""

from __future__ import annotations

import subprocess
import sys

from fleet import histogram_grid, histograms


def test_the_parsing_half_of_ingest_imports_no_numpy() -> None:
    """numpy costs ~0.1 s before `phasefit ingest` can fork its parsers; GPU samples never need it."""
    probe = "import sys, fleet.ingest_blocks; print('numpy' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


def test_bounds_off_the_grid_take_the_numpy_way() -> None:
    le, counts, count = [0.013, 0.27, 4.4], [1.0, 5.0, 9.0], 10.0
    assert histogram_grid.stored_on_grid(le, counts, count) is None
    assert histograms.stored(le, counts, count) == histograms.encode(histograms.rebin(le, counts, count))
    on_grid = [0.01, 0.025, 0.05]
    quick = histogram_grid.stored_on_grid(on_grid, counts, count)
    assert quick is not None and histograms.stored(on_grid, counts, count) == quick
