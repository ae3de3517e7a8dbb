"""The operator's static mapping file (YAML): workers, their role, model, GPUs and engine endpoint.

    workers:
      - worker_id: llama70b-prefill-0
        role: prefill                      # prefill | decode | mixed
        model: meta-llama/Llama-3.1-70B-Instruct
        precision: fp8
        engine_url: http://127.0.0.1:8000/metrics
        deployment: llama70b                # the router group (pool), where no pod label names it
        gpus: [GPU-5d2b..., GPU-8e1c...]   # GPU or MIG UUIDs

Every key but ``worker_id`` is optional.  The role here is the last strong source (roles.py); ``gpus``
attributes GPUs the collector cannot attribute itself (bare metal without a readable /proc, MPS).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleet.contract import Role


class MappedWorker(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    worker_id: str = Field(min_length=1, max_length=253)
    role: Role | None = None
    model: str | None = Field(default=None, min_length=1, max_length=253)
    precision: str | None = Field(default=None, min_length=1, max_length=64)
    engine_url: str | None = None
    deployment: str | None = Field(default=None, min_length=1, max_length=253)
    gpus: tuple[str, ...] = ()


class RoleMapping(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    workers: tuple[MappedWorker, ...] = ()

    def by_worker(self, worker_id: str) -> MappedWorker | None:
        return next((w for w in self.workers if w.worker_id == worker_id), None)

    def by_url(self, url: str) -> MappedWorker | None:
        return next((w for w in self.workers if w.engine_url == url), None)

    def by_gpu(self, uuid: str) -> MappedWorker | None:
        return next((w for w in self.workers if uuid in w.gpus), None)


def load_mapping(path: Path) -> RoleMapping:
    """Read and validate a mapping file; ValueError naming the file and the problem."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ValueError(f"cannot read the role mapping file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"the role mapping file {path} is not valid YAML: {exc}") from exc
    try:
        return RoleMapping.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"the role mapping file {path} is invalid: {problems}") from exc
