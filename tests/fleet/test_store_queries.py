"""Read helpers: time-range samples as columns, per GPU, per worker and fleet-wide; GPUs, workers, counts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine

from fleet.contract import EngineSample, GpuSample
from fleet.store.engine import writing
from fleet.store.queries import (
    engine_samples,
    get_worker,
    gpu_samples,
    list_gpus,
    list_workers,
    sample_time_range,
    table_counts,
)
from fleet.store.rows import GPU_SAMPLE_COLUMNS
from fleet.store.writer import write_samples
from tests.fleet.store_factories import T0, engine_sample, gpu_sample


@pytest.fixture
def filled(store_engine: Engine) -> Engine:
    records: list[GpuSample | EngineSample] = [
        gpu_sample(gpu, minute, sm_active=gpu / 10 + minute / 100) for minute in range(5) for gpu in range(4)
    ]
    records += [
        engine_sample(w, minute, prompt_tokens=w * 100 + minute) for minute in range(5) for w in range(2)
    ]
    with writing(store_engine) as connection:
        write_samples(
            connection, records, sku_resolver=lambda name, _mig: "H200-SXM" if "H200" in name else "H100-SXM"
        )
    return store_engine


def test_fleet_wide_gpu_samples_are_columns_ordered_by_time_then_gpu(filled: Engine) -> None:
    with filled.connect() as connection:
        columns = gpu_samples(connection, T0 + timedelta(minutes=1), T0 + timedelta(minutes=3))
    assert list(columns) == list(GPU_SAMPLE_COLUMNS)
    assert columns["ts"] == [(T0 + timedelta(minutes=m)).timestamp() for m in (1, 1, 1, 1, 2, 2, 2, 2)]
    assert all(isinstance(ts, float) for ts in columns["ts"])
    assert columns["gpu_uuid"] == ["GPU-0000", "GPU-0001", "GPU-0002", "GPU-0003"] * 2
    assert columns["sm_active"][:2] == pytest.approx([0.01, 0.11])
    assert set(columns["state"]) == {"ok"}


def test_gpu_samples_per_gpu_and_per_worker_with_chosen_columns(filled: Engine) -> None:
    end = T0 + timedelta(hours=1)
    with filled.connect() as connection:
        one_gpu = gpu_samples(connection, T0, end, gpu_uuids=["GPU-0002"], columns=("ts", "sm_active"))
        worker = gpu_samples(connection, T0, end, worker_ids=["worker-1"], columns=("gpu_uuid",))
        nothing = gpu_samples(connection, end, end + timedelta(hours=1), columns=("ts",))
        with pytest.raises(ValueError, match="unknown columns"):
            gpu_samples(connection, T0, end, columns=("ts", "bogus"))
    assert list(one_gpu) == ["ts", "sm_active"]
    assert one_gpu["sm_active"] == pytest.approx([0.2, 0.21, 0.22, 0.23, 0.24])
    assert sorted(set(worker["gpu_uuid"])) == ["GPU-0002", "GPU-0003"] and len(worker["gpu_uuid"]) == 10
    assert nothing == {"ts": []}


def test_engine_samples_per_worker(filled: Engine) -> None:
    with filled.connect() as connection:
        columns = engine_samples(connection, T0, T0 + timedelta(minutes=2), worker_ids=["worker-1"])
        everyone = engine_samples(connection, T0, T0 + timedelta(hours=1), columns=("worker_id",))
    assert columns["prompt_tokens"] == [100, 101]
    assert columns["role"] == ["decode", "decode"]
    assert len(everyone["worker_id"]) == 10


def test_time_range_gpus_workers_and_counts(filled: Engine) -> None:
    with filled.connect() as connection:
        assert sample_time_range(connection) == (T0, T0 + timedelta(minutes=4))
        gpus = list_gpus(connection)
        h200 = list_gpus(connection, sku="H200-SXM")
        workers = list_workers(connection)
        worker = get_worker(connection, "worker-1")
        missing = get_worker(connection, "nope")
        counts = table_counts(connection)
    assert [gpu.gpu_uuid for gpu in gpus] == ["GPU-0000", "GPU-0001", "GPU-0002", "GPU-0003"]
    assert [gpu.gpu_uuid for gpu in h200] == ["GPU-0001", "GPU-0003"]
    assert gpus[0].first_seen == T0 and gpus[0].last_seen == T0 + timedelta(minutes=4)
    assert [w.worker_id for w in workers] == ["worker-0", "worker-1"]
    assert worker is not None and worker.gpu_uuids == ("GPU-0002", "GPU-0003") and worker.tp == 2
    assert missing is None
    assert counts["gpu_samples"] == 20 and counts["engine_samples"] == 10 and counts["findings"] == 0
    rollups = {"gpu_samples_1m", "gpu_samples_1h", "engine_samples_1m", "engine_samples_1h"}
    assert set(counts) >= {"nodes", "gpus", "workers", "alert_events", "reports", *rollups}


def test_an_empty_store_has_no_time_range(store_engine: Engine) -> None:
    with store_engine.connect() as connection:
        assert sample_time_range(connection) is None
        assert set(table_counts(connection).values()) == {0}


def test_cluster_and_deployment_are_kept_on_gpus_and_workers_latest_window_wins(store_engine: Engine) -> None:
    records: list[GpuSample | EngineSample] = [
        gpu_sample(0, 0, cluster="east"),
        gpu_sample(1, 0),
        engine_sample(0, 0, cluster="east", deployment="serving/llama"),
        engine_sample(0, 1, cluster="east", deployment="canary/llama"),
        engine_sample(1, 0),
    ]
    with writing(store_engine) as connection:
        write_samples(connection, records)
    with store_engine.connect() as connection:
        gpus = {g.gpu_uuid: g for g in list_gpus(connection)}
        workers = {w.worker_id: w for w in list_workers(connection)}
    assert gpus["GPU-0000"].cluster == "east" and gpus["GPU-0001"].cluster is None
    assert (workers["worker-0"].cluster, workers["worker-0"].deployment) == ("east", "canary/llama")
    assert (workers["worker-1"].cluster, workers["worker-1"].deployment) == (None, None)


def test_what_an_engine_reports_of_itself_is_kept_on_its_worker_latest_window_wins(
    store_engine: Engine,
) -> None:
    records: list[GpuSample | EngineSample] = [
        engine_sample(0, 0, kv_capacity_tokens=92962, max_running_requests=4097),
        engine_sample(0, 1, kv_capacity_tokens=92962, max_running_requests=256),
        engine_sample(1, 1, max_running_requests=2**31 - 1),
        engine_sample(1, 0, max_running_requests=8),  # an older window: the later one's cap stays
        engine_sample(2, 0),
    ]
    with writing(store_engine) as connection:
        write_samples(connection, records)
    with store_engine.connect() as connection:
        workers = {w.worker_id: w for w in list_workers(connection)}
        again = get_worker(connection, "worker-0")
    assert (workers["worker-0"].kv_capacity_tokens, workers["worker-0"].max_running_requests) == (92962, 256)
    assert workers["worker-1"].max_running_requests == 2**31 - 1  # the contract's bound fits the column
    assert workers["worker-2"].max_running_requests is None  # not reported: unknown, never a default
    assert again is not None and again.max_running_requests == 256
    with writing(store_engine) as connection:  # a later window that does not say it: unknown again
        write_samples(connection, [engine_sample(0, 2)])
    with store_engine.connect() as connection:
        assert {w.worker_id: w for w in list_workers(connection)}["worker-0"].max_running_requests is None
