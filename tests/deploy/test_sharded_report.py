"""The sharded weekly audit component: an indexed Job of shards before a report that merges them."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.deploy_k8s_schema import validate
from tests.deploy.test_kubernetes_manifests import find, objects, with_component


def _script(cronjob: dict[str, object]) -> str:
    spec = cronjob["spec"]["jobTemplate"]["spec"]  # type: ignore[index]
    (container,) = spec["template"]["spec"]["containers"]
    return str(container["args"][0])


def test_the_shards_run_as_an_indexed_job_before_the_report_merges_them(tmp_path: Path) -> None:
    objs = with_component(tmp_path, "sharded-report")
    assert not [p for o in objs for p in validate(o)]
    shards = find(objs, "CronJob", "phasefit-report-shards")
    job = shards["spec"]["jobTemplate"]["spec"]
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"] == 4
    assert '--shard "${JOB_COMPLETION_INDEX}/4"' in _script(shards)
    report = find(objs, "CronJob", "phasefit-report")
    assert "--shards 4" in _script(report) and "--shard " not in _script(report)
    hour = lambda cronjob: int(cronjob["spec"]["schedule"].split()[1])  # noqa: E731
    assert hour(shards) < hour(report) and shards["spec"]["schedule"].split()[4] == "1"


def test_the_base_report_analyses_the_week_itself() -> None:
    report = find(objects("base"), "CronJob", "phasefit-report")
    assert "--shards" not in _script(report)
