"""Measured-kernel physics: step times interpolated from NVIDIA AI Configurator's tables (``data/measured``).

Each table (``data/measured/<backend>/<model>.csv``, written by ``scripts/measured_physics.py``) gives,
per SKU, TP and EP, the decode step time of a batch of B sequences at context C and the prefill time of
a batch of B prompts of S tokens, composed by AI Configurator from kernels measured on H100 SXM and H200
SXM. A step here takes its *time* from those tables; its *work* (FLOPs and bytes, which drive the DCGM
counters) and the KV-cache capacity still come from the formulas of ``fleetsim.physics``.

Interpolation is piecewise linear in the batch and in the context (decode time is close to affine in
both), extrapolated linearly past the grid's edges; grid points AI Configurator left out (out of memory)
are filled from the smaller batches of the same context. A prefill step of ``c`` tokens from prompts of
``L`` tokens reads as ``c / L`` prompts of ``L`` tokens (one prompt of ``c`` tokens when ``c < L``). A
colocated step (decode and prefill tokens together) takes the sum of the two.

Workers whose SKU, TP or EP the tables do not cover keep the formula's times; ``sources`` says which.
The analyzer never reads these tables (tests/test_architecture.py).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleet.precision import Precision
from fleetsim.physics import (
    ArrayLike,
    BatchLimits,
    Efficiency,
    EngineConfig,
    FloatArray,
    StepBreakdown,
    StepModel,
    WorkerHardware,
)

TABLES_ENV = "PHASEFIT_MEASURED_TABLES"
COLUMNS = ("sku", "tp", "ep", "phase", "batch", "tokens", "step_s", "mem_gib")
_EXTRA_BATCHES = (2048.0, 16384.0, 131072.0)  # linear extrapolation points past the table's largest batch


def default_folder() -> Path:
    """``$PHASEFIT_MEASURED_TABLES``, else ``data/measured`` of the checkout this package lives in."""
    env = os.environ.get(TABLES_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[1] / "data" / "measured"


def _fold(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.casefold())


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one grid per table row set
class Grid:
    """Step seconds on a grid of batches (rows) x tokens (columns), holes filled."""

    batches: FloatArray
    tokens: FloatArray
    seconds: FloatArray  # (len(batches), len(tokens))

    @classmethod
    def from_points(cls, points: dict[tuple[float, float], float]) -> Grid:
        batches = np.array(sorted({b for b, _ in points}), dtype=np.float64)
        tokens = np.array(sorted({t for _, t in points}), dtype=np.float64)
        values = np.full((len(batches), len(tokens)), np.nan)
        for (b, t), s in points.items():
            values[np.searchsorted(batches, b), np.searchsorted(tokens, t)] = s
        for j in range(len(tokens)):
            values[:, j] = _fill_column(batches, values[:, j])
        for i in range(len(batches)):  # a column with no point at all: from its neighbours
            values[i] = _fill_column(tokens, values[i])
        if len(tokens) == 1:  # one length measured: flat in length
            tokens, values = np.array([tokens[0], tokens[0] + 1.0]), np.hstack([values, values])
        if len(batches) == 1:  # one batch measured: in proportion to the batch
            batches, values = np.array([batches[0], 2.0 * batches[0]]), np.vstack([values, 2.0 * values])
        return cls(batches, tokens, values)

    def extended(self) -> Grid:
        """The grid with rows at very large batches, extrapolated linearly from its last two rows."""
        if len(self.batches) < 2:
            return self
        b0, b1 = self.batches[-2], self.batches[-1]
        slope = (self.seconds[-1] - self.seconds[-2]) / (b1 - b0)
        extra = [b for b in _EXTRA_BATCHES if b > b1]
        rows = [self.seconds[-1] + np.maximum(slope, 0.0) * (b - b1) for b in extra]
        return Grid(
            np.concatenate([self.batches, extra]),
            self.tokens,
            np.vstack([self.seconds, *rows]) if rows else self.seconds,
        )

    def at(self, batch: ArrayLike, tokens: ArrayLike) -> FloatArray:
        """Seconds at (``batch``, ``tokens``), broadcast: bilinear, extrapolated linearly past the edges."""
        b, t = np.broadcast_arrays(np.asarray(batch, dtype=np.float64), np.asarray(tokens, dtype=np.float64))
        nb, nt = len(self.batches), len(self.tokens)
        i = np.clip(np.searchsorted(self.batches, b, side="right") - 1, 0, nb - 2)
        j = np.clip(np.searchsorted(self.tokens, t, side="right") - 1, 0, nt - 2)
        fb = (b - self.batches[i]) / (self.batches[i + 1] - self.batches[i])
        ft = (t - self.tokens[j]) / (self.tokens[j + 1] - self.tokens[j])
        s = self.seconds
        low = s[i, j] + (s[i, j + 1] - s[i, j]) * ft
        high = s[i + 1, j] + (s[i + 1, j + 1] - s[i + 1, j]) * ft
        return np.asarray(np.maximum(low + (high - low) * fb, self.floor), dtype=np.float64)

    def curve(self, batches: FloatArray, tokens: FloatArray) -> FloatArray:
        """``at`` for every batch of ``batches`` at each of ``tokens``: shape (*tokens.shape, B). The
        interpolation along the lengths is done once per grid row, not once per batch."""
        nt = len(self.tokens)
        j = np.clip(np.searchsorted(self.tokens, tokens, side="right") - 1, 0, nt - 2)
        ft = (tokens - self.tokens[j]) / (self.tokens[j + 1] - self.tokens[j])
        rows = self.seconds[:, j] + (self.seconds[:, j + 1] - self.seconds[:, j]) * ft  # (rows, *tokens)
        nb = len(self.batches)
        i = np.clip(np.searchsorted(self.batches, batches, side="right") - 1, 0, nb - 2)
        fb = (batches - self.batches[i]) / (self.batches[i + 1] - self.batches[i])
        shape = (len(batches),) + (1,) * tokens.ndim
        out = rows[i] + (rows[i + 1] - rows[i]) * fb.reshape(shape)
        return np.moveaxis(np.maximum(out, self.floor), 0, -1)

    @property
    def floor(self) -> float:
        """No step is faster than a tenth of the fastest measured one (extrapolation's guard)."""
        return 0.1 * float(np.min(self.seconds))


def _fill_column(x: FloatArray, y: FloatArray) -> FloatArray:
    """Missing values of y(x): linear from the known ones (extrapolated from the last two known)."""
    known = ~np.isnan(y)
    if known.all() or known.sum() == 0:
        return y
    if known.sum() == 1:
        return np.where(known, y, y[known][0] * np.maximum(x / x[known][0], 1.0))
    return _interp(x, x[known], y[known])


def _interp(x: FloatArray, xp: FloatArray, fp: FloatArray) -> FloatArray:
    """np.interp with linear extrapolation past both ends, never below a tenth of the smallest value."""
    if len(xp) == 1:
        return np.full_like(np.asarray(x, dtype=np.float64), fp[0])
    y = np.interp(x, xp, fp)
    lo_slope = (fp[1] - fp[0]) / (xp[1] - xp[0])
    hi_slope = (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    y = np.where(x < xp[0], fp[0] + lo_slope * (x - xp[0]), y)
    y = np.where(x > xp[-1], fp[-1] + max(hi_slope, 0.0) * (x - xp[-1]), y)
    return np.maximum(y, 0.1 * float(np.min(fp)))


@dataclass(frozen=True)
class Table:
    """One backend x model table: provenance and grids per (SKU, TP, EP)."""

    path: str
    meta: dict[str, str]
    decode: dict[tuple[str, int, int], Grid]
    prefill: dict[tuple[str, int, int], Grid]

    @property
    def backend(self) -> str:
        return self.meta.get("backend", "")


def parse_table(text: str, path: str) -> Table:
    """A table file: ``# key: value`` provenance lines, then CSV with ``COLUMNS``.

    ValueError names the file and line of a bad row."""
    meta: dict[str, str] = {}
    lines = text.splitlines()
    body_from = 0
    for i, line in enumerate(lines):
        if not line.startswith("#"):
            body_from = i
            break
        key, _, value = line[1:].strip().partition(":")
        meta[key.strip()] = f"{meta[key.strip()]}\n{value.strip()}" if key.strip() in meta else value.strip()
    reader = csv.DictReader(io.StringIO("\n".join(lines[body_from:])))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ValueError(f"{path}: header {reader.fieldnames} is not {list(COLUMNS)}")
    points: dict[str, dict[tuple[str, int, int], dict[tuple[float, float], float]]] = {
        "decode": {},
        "prefill": {},
    }
    for n, row in enumerate(reader, start=body_from + 2):
        try:
            where = (row["sku"], int(row["tp"]), int(row["ep"] or 1))
            seconds = float(row["step_s"])
            phase = row["phase"]
            if phase not in points or not seconds > 0:
                raise ValueError(f"phase {phase!r}, step_s {seconds}")
            points[phase].setdefault(where, {})[(float(row["batch"]), float(row["tokens"]))] = seconds
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{path} line {n}: {exc}") from exc
    return Table(
        path,
        meta,
        {k: Grid.from_points(v).extended() for k, v in points["decode"].items()},
        {k: Grid.from_points(v).extended() for k, v in points["prefill"].items()},
    )


@dataclass
class MeasuredTables:
    """Every table found, looked up by catalog model, backend, SKU, TP and EP."""

    folder: Path
    tables: list[Table] = field(default_factory=list)

    def find(self, model_key: str, model_name: str, backend: str) -> Table | None:
        """The table of a catalog model for ``backend``; TensorRT-LLM's when that backend has none."""
        wanted = {_fold(model_key), _fold(model_name)}
        mine = [t for t in self.tables if wanted & _names(t)]
        for name in (backend, "trtllm"):
            for t in mine:
                if t.backend == name:
                    return t
        return mine[0] if mine else None

    def provenance(self) -> list[dict[str, str]]:
        keep = ("source", "aiconfigurator_version", "backend", "backend_version", "model", "quantization")
        return [{"file": t.path, **{k: t.meta.get(k, "") for k in keep}} for t in self.tables]


def _names(table: Table) -> set[str]:
    stem = Path(table.path).stem
    out = {_fold(stem), _fold(table.meta.get("model", "")), _fold(table.meta.get("catalog_model", ""))}
    return {n for n in out if n}


def load_tables(folder: Path | None = None) -> MeasuredTables:
    """The tables under ``folder`` (default ``default_folder()``).

    FileNotFoundError, saying how to get them, when there are none."""
    where = folder or default_folder()
    files = sorted(where.glob("*/*.csv")) if where.is_dir() else []
    if not files:
        raise FileNotFoundError(
            f"no measured step-time tables under {where}: the 'measured' physics needs data/measured/ of a "
            f"phasefit checkout (or set {TABLES_ENV}); scripts/measured_physics.py writes them"
        )
    return MeasuredTables(
        where, [parse_table(p.read_text(encoding="utf-8"), str(p.relative_to(where))) for p in files]
    )


def _grids(table: Table | None, w: WorkerHardware, model: str) -> tuple[tuple[Grid, Grid] | None, str]:
    """The decode and prefill grids for one worker, and where its step times come from."""
    if table is None:
        return None, f"model formulas (no measured table for {model})"
    quantization = table.meta.get("quantization", "").casefold()
    if "fp8" in quantization and w.precision is not Precision.FP8:
        return None, f"model formulas (the measured table is FP8, the pool serves {w.precision})"
    ep = w.ep if w.model.experts_total else 1
    keys = [(w.sku.key, w.tp, ep)]
    keys += sorted(
        (k for k in table.decode if k[:2] == (w.sku.key, w.tp) and k[2] != ep), key=lambda k: abs(k[2] - ep)
    )
    for key in keys:
        if key in table.decode and key in table.prefill:
            note = "" if key[2] == ep else f", EP {key[2]} rows for EP {ep}"
            version = table.meta.get("backend_version", "?")
            return (table.decode[key], table.prefill[key]), f"measured: {table.path} ({version}{note})"
    return None, f"model formulas (no measured {w.sku.key} TP {w.tp} rows)"


class MeasuredStepModel(StepModel):
    """A ``StepModel`` whose step times come from measured tables where they cover a worker."""

    def __init__(
        self,
        workers: Sequence[WorkerHardware],
        engine: EngineConfig,
        eff: Efficiency,
        tables: MeasuredTables,
        backend: str,
    ) -> None:
        super().__init__(workers, engine, eff)
        first = workers[0]
        table = tables.find(first.model.key, first.model.name, backend)
        self.sources: list[str] = []
        self._decode: list[Grid | None] = []
        self._prefill: list[Grid | None] = []
        for w in workers:
            found, source = _grids(table, w, first.model.name)
            self._decode.append(found[0] if found else None)
            self._prefill.append(found[1] if found else None)
            self.sources.append(source)
        self._speed = np.array([w.speed for w in workers], dtype=np.float64)
        self._groups: dict[tuple[Grid, Grid], list[int]] = {}
        for k, (dec, pre) in enumerate(zip(self._decode, self._prefill, strict=True)):
            if dec is not None and pre is not None:
                self._groups.setdefault((dec, pre), []).append(k)

    def _seconds(
        self, b: FloatArray, c: FloatArray, ctx: FloatArray, keys: FloatArray, formula: FloatArray
    ) -> FloatArray:
        """Measured seconds of steps with ``b`` decode sequences and ``c`` prefill tokens (broadcast);
        the workers (last axis) that share a grid are looked up together."""
        shape = np.broadcast_shapes(
            b.shape, c.shape, ctx.shape, keys.shape, formula.shape, (len(self._decode),)
        )
        out = np.array(np.broadcast_to(formula, shape), dtype=np.float64, copy=True)
        for (dec, pre), cols in self._groups.items():
            idx = np.array(cols)
            bk = np.broadcast_to(b, shape)[..., idx]
            ck = np.broadcast_to(c, shape)[..., idx]
            t_dec = np.where(bk > 0, dec.at(np.maximum(bk, 1.0), np.broadcast_to(ctx, shape)[..., idx]), 0.0)
            t_dec *= np.minimum(bk, 1.0)  # a fraction of a sequence (a mean batch under 1) takes its share
            length = np.minimum(
                np.maximum(2.0 * np.broadcast_to(keys, shape)[..., idx], 1.0), np.maximum(ck, 1.0)
            )
            t_pre = np.where(ck > 0, pre.at(np.maximum(ck / length, 1e-3), length), 0.0)
            out[..., idx] = (t_dec + t_pre) / self._speed[idx]
        return out

    def breakdown(
        self, decode: ArrayLike, prefill: ArrayLike, decode_context: ArrayLike, prefill_keys: ArrayLike
    ) -> StepBreakdown:
        work = super().breakdown(decode, prefill, decode_context, prefill_keys)
        seconds = self._seconds(
            np.asarray(decode, dtype=np.float64),
            np.asarray(prefill, dtype=np.float64),
            np.asarray(decode_context, dtype=np.float64),
            np.asarray(prefill_keys, dtype=np.float64),
            work.seconds,
        )
        comm = work.comm_seconds * np.where(work.seconds > 0, seconds / np.maximum(work.seconds, 1e-12), 1.0)
        return StepBreakdown(
            seconds=seconds,
            gemm_flops=work.gemm_flops,
            attention_flops=work.attention_flops,
            hbm_bytes=work.hbm_bytes,
            comm_seconds=np.minimum(comm, seconds),
            fixed_seconds=np.minimum(work.fixed_seconds, seconds),
            link_bytes=work.link_bytes,
        )

    # --- batches by search on the measured curve -------------------------------------------------

    def _curve(self, ratio: ArrayLike, ctx: ArrayLike, keys: ArrayLike) -> tuple[FloatArray, FloatArray]:
        """(batches, seconds of a step at each batch): shapes (B,) and (*broadcast, workers, B)."""
        grid = {float(x) for d in self._decode if d is not None for x in d.batches}
        batches = np.unique(np.concatenate([sorted(grid), np.geomspace(0.25, 131072.0, 20)]))
        rho = np.asarray(ratio, dtype=np.float64)
        base = np.broadcast_shapes(np.shape(rho), np.shape(ctx), np.shape(keys), (len(self._decode),))
        if not rho.any() and all(d is not None for d in self._decode):
            return batches, self._decode_curve(
                batches, np.broadcast_to(np.asarray(ctx, dtype=np.float64), base)
            )
        lead = (len(batches),) + (1,) * len(base)  # the batch axis first: workers stay the last axis
        b = np.broadcast_to(batches.reshape(lead), (len(batches), *base))
        seconds = self.breakdown(b, b * rho, np.broadcast_to(ctx, base), np.broadcast_to(keys, base)).seconds
        return batches, np.moveaxis(np.asarray(seconds, dtype=np.float64), 0, -1)

    def _decode_curve(self, batches: FloatArray, ctx: FloatArray) -> FloatArray:
        """Decode-only steps at every batch of ``batches`` (same as ``breakdown``), each context's
        interpolation along the table's lengths done once for all batches: (*ctx.shape, B)."""
        out = np.empty((*ctx.shape, len(batches)), dtype=np.float64)
        fraction = np.minimum(batches, 1.0)
        for (dec, _), cols in self._groups.items():
            idx = np.array(cols)
            curve = dec.curve(np.maximum(batches, 1.0), ctx[..., idx]) * fraction
            out[..., idx, :] = curve / self._speed[idx][:, None]
        return out

    def batch_limits(
        self,
        decode_context: ArrayLike,
        prefill_keys: ArrayLike,
        ratio: ArrayLike = 0.0,
        tpot_target_s: float | None = None,
        reserved_context: ArrayLike | None = None,
    ) -> BatchLimits:
        plain = super().batch_limits(decode_context, prefill_keys, ratio, None, reserved_context)
        if tpot_target_s is None:
            return plain
        batches, seconds = self._curve(
            np.broadcast_to(ratio, plain.batch.shape),
            np.broadcast_to(decode_context, plain.batch.shape),
            np.broadcast_to(prefill_keys, plain.batch.shape),
        )
        by_tpot = _largest_under(batches, seconds, tpot_target_s)
        batch = np.maximum(np.minimum(plain.batch, by_tpot), 1.0)
        kv_bound = plain.by_kv <= np.minimum(plain.batch, by_tpot) + 1e-9
        return BatchLimits(batch=batch, kv_bound=kv_bound & plain.kv_bound, by_kv=plain.by_kv)

    def batch_for_rate(
        self, rate: ArrayLike, decode_context: ArrayLike, prefill_keys: ArrayLike, ratio: ArrayLike = 0.0
    ) -> FloatArray:
        r = np.asarray(rate, dtype=np.float64)
        shape = np.broadcast_shapes(
            r.shape, np.shape(decode_context), np.shape(ratio), np.shape(prefill_keys)
        )
        batches, seconds = self._curve(
            np.broadcast_to(ratio, shape),
            np.broadcast_to(decode_context, shape),
            np.broadcast_to(prefill_keys, shape),
        )
        rates = batches / seconds  # output tokens/s at each grid batch, increasing in practice
        rates = np.maximum.accumulate(rates, axis=-1)
        rr = np.broadcast_to(r, shape)
        k = np.argmax(rates >= rr[..., None], axis=-1)
        reachable = rates[..., -1] >= rr
        k = np.clip(k, 1, len(batches) - 1)
        # Between two curve points the step time is linear in the batch, t = t0 + s (B - b0): solve
        # B = r t exactly there, clipped to the segment.
        t0 = np.take_along_axis(seconds, (k - 1)[..., None], axis=-1)[..., 0]
        t1 = np.take_along_axis(seconds, k[..., None], axis=-1)[..., 0]
        b0, b1 = batches[k - 1], batches[k]
        slope = (t1 - t0) / (b1 - b0)
        with np.errstate(divide="ignore", invalid="ignore"):
            exact = rr * (t0 - slope * b0) / (1.0 - rr * slope)
        batch = np.clip(np.where(rr * slope < 1.0, exact, b1), b0, b1)
        batch = np.where(rr <= rates[..., 0], rr * seconds[..., 0], batch)  # below the first point: B = r t
        return np.asarray(np.where(rr > 0, np.where(reachable, batch, np.inf), 0.0), dtype=np.float64)


def _largest_under(batches: FloatArray, seconds: FloatArray, limit: float) -> FloatArray:
    """Per element, the largest batch whose step takes at most ``limit`` (linear between grid points)."""
    ok = seconds <= limit
    count = ok.sum(axis=-1)
    k = np.clip(count - 1, 0, len(batches) - 2)
    lo = np.take_along_axis(seconds, k[..., None], axis=-1)[..., 0]
    hi = np.take_along_axis(seconds, (k + 1)[..., None], axis=-1)[..., 0]
    frac = np.clip((limit - lo) / np.maximum(hi - lo, 1e-12), 0.0, 1.0)
    out = batches[k] + frac * (batches[k + 1] - batches[k])
    out = np.where(count == 0, 1.0, out)
    return np.asarray(np.where(count == len(batches), np.inf, out), dtype=np.float64)
