"""A small, strict Kustomize resolver for the tests (``kubectl kustomize`` is not on every CI machine).

It supports exactly the features phasefit's kustomizations use and refuses anything else, so a new feature
cannot slip in untested: ``resources`` (files and directories), ``components``, ``namespace``, ``images``
and ``patches`` holding JSON 6902 operations with a ``target``. Like kustomize's default load restrictor, a
file resource must live inside the kustomization's own directory (directories holding a kustomization may
be anywhere). Where ``kubectl kustomize`` exists, the tests compare this resolver's output with it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_KEYS = {"apiVersion", "kind", "resources", "components", "namespace", "images", "patches"}
CLUSTER_SCOPED_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "RuntimeClass",
    "CustomResourceDefinition",
    "StorageClass",
    "PersistentVolume",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
}

Obj = dict[str, Any]


class KustomizeError(Exception):
    pass


@dataclass
class Resolution:
    objects: list[Obj] = field(default_factory=list)
    files: set[Path] = field(default_factory=set)  # every file read, kustomizations included
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # (file, why) when allowed to be absent


def kustomization_file(folder: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        if (folder / name).is_file():
            return folder / name
    raise KustomizeError(f"{folder}: no kustomization.yaml")


def load_kustomization(folder: Path) -> Obj:
    path = kustomization_file(folder)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise KustomizeError(f"{path}: not a mapping")
    unknown = set(data) - SUPPORTED_KEYS
    if unknown:
        raise KustomizeError(
            f"{path}: unsupported kustomization keys {sorted(unknown)} (extend the resolver)"
        )
    return data


def build(folder: Path, *, may_be_absent: Callable[[Path], bool] = lambda _p: False) -> Resolution:
    """Resolve the kustomization in ``folder``. Files for which ``may_be_absent`` is true may be missing."""
    result = Resolution()
    result.objects = _build(folder.resolve(), "Kustomization", result, may_be_absent, stack=())
    return result


def _build(
    folder: Path,
    expected_kind: str,
    result: Resolution,
    may_be_absent: Callable[[Path], bool],
    stack: tuple[Path, ...],
) -> list[Obj]:
    if folder in stack:
        raise KustomizeError(f"kustomization cycle through {folder}")
    data = load_kustomization(folder)
    result.files.add(kustomization_file(folder))
    kind = data.get("kind", "Kustomization")
    if kind != expected_kind:
        raise KustomizeError(f"{folder}: kind {kind!r} where a {expected_kind} was expected")
    objects: list[Obj] = []
    for entry in data.get("resources", []):
        objects.extend(_resource(folder, entry, result, may_be_absent, (*stack, folder)))
    for entry in data.get("components", []):
        component = (folder / entry).resolve()
        # A component sees (and patches) everything accumulated so far, then adds its own resources.
        objects = _apply_component(component, objects, result, may_be_absent, (*stack, folder))
    return _transform(folder, data, objects)


def _apply_component(
    folder: Path,
    objects: list[Obj],
    result: Resolution,
    may_be_absent: Callable[[Path], bool],
    stack: tuple[Path, ...],
) -> list[Obj]:
    data = load_kustomization(folder)
    result.files.add(kustomization_file(folder))
    if data.get("kind") != "Component":
        raise KustomizeError(f"{folder}: listed under components but its kind is {data.get('kind')!r}")
    added: list[Obj] = []
    for entry in data.get("resources", []):
        added.extend(_resource(folder, entry, result, may_be_absent, (*stack, folder)))
    return _transform(folder, data, objects + added)


def _resource(
    folder: Path,
    entry: str,
    result: Resolution,
    may_be_absent: Callable[[Path], bool],
    stack: tuple[Path, ...],
) -> list[Obj]:
    if "://" in entry or entry.startswith("github.com/"):
        raise KustomizeError(f"{folder}: remote resource {entry!r} is not allowed")
    path = (folder / entry).resolve()
    if path.is_dir():
        return _build(path, "Kustomization", result, may_be_absent, stack)
    if not path.is_relative_to(folder):
        raise KustomizeError(
            f"{folder}: file resource {entry!r} is outside the kustomization root "
            "(kustomize's load restrictor refuses it; reference a directory with its own kustomization)"
        )
    if not path.is_file():
        if may_be_absent(path):
            result.skipped.append((path, "absent"))
            return []
        raise KustomizeError(f"{folder}: resource {entry!r} does not exist")
    result.files.add(path)
    return list(load_objects(path))


def load_objects(path: Path) -> Iterator[Obj]:
    for index, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
        if doc is None:
            continue
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            raise KustomizeError(f"{path}: document {index} is not a Kubernetes object")
        yield doc


def _transform(folder: Path, data: Obj, objects: list[Obj]) -> list[Obj]:
    objects = [copy.deepcopy(o) for o in objects]
    namespace = data.get("namespace")
    if namespace:
        for obj in objects:
            _set_namespace(obj, namespace)
    for patch in data.get("patches", []):
        _apply_patch_entry(folder, patch, objects)
    for image in data.get("images", []):
        for obj in objects:
            _set_image(obj, image)
    return objects


def _set_namespace(obj: Obj, namespace: str) -> None:
    if obj["kind"] in CLUSTER_SCOPED_KINDS:
        if obj["kind"] in {"ClusterRoleBinding"}:
            for subject in obj.get("subjects", []):
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = namespace
        return
    obj.setdefault("metadata", {})["namespace"] = namespace
    if obj["kind"] == "RoleBinding":
        for subject in obj.get("subjects", []):
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace


def _apply_patch_entry(folder: Path, entry: Obj, objects: list[Obj]) -> None:
    unknown = set(entry) - {"path", "patch", "target"}
    if unknown:
        raise KustomizeError(f"{folder}: unsupported patch keys {sorted(unknown)}")
    if "path" in entry:
        path = (folder / entry["path"]).resolve()
        if not path.is_relative_to(folder) or not path.is_file():
            raise KustomizeError(f"{folder}: patch file {entry['path']!r} missing or outside the root")
        text = path.read_text(encoding="utf-8")
    else:
        text = entry["patch"]
    ops = yaml.safe_load(text)
    if not isinstance(ops, list):
        raise KustomizeError(f"{folder}: only JSON 6902 patches (a list of operations) are supported")
    target = entry.get("target")
    if not isinstance(target, dict):
        raise KustomizeError(f"{folder}: a JSON 6902 patch needs a target")
    matched = [o for o in objects if _matches(o, target)]
    if not matched:
        raise KustomizeError(f"{folder}: patch target {target} matches no resource")
    for obj in matched:
        for op in ops:
            json_patch(obj, op)


def _matches(obj: Obj, target: Obj) -> bool:
    unknown = set(target) - {"group", "version", "kind", "name", "namespace"}
    if unknown:
        raise KustomizeError(f"unsupported patch target keys {sorted(unknown)}")
    group, _, version = obj["apiVersion"].rpartition("/")
    checks = {
        "group": group,
        "version": version,
        "kind": obj["kind"],
        "name": obj.get("metadata", {}).get("name"),
        "namespace": obj.get("metadata", {}).get("namespace"),
    }
    return all(re.fullmatch(str(value), str(checks[key])) for key, value in target.items())


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise KustomizeError(f"JSON pointer {path!r} must start with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def json_patch(doc: Obj, op: Obj) -> None:
    """Apply one RFC 6902 operation (add, remove, replace, test) in place."""
    kind = op.get("op")
    parts = _pointer(op["path"])
    parent: Any = doc
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    if kind == "test":
        current = parent[int(last)] if isinstance(parent, list) else parent[last]
        if current != op["value"]:
            raise KustomizeError(f"test failed at {op['path']}: {current!r} != {op['value']!r}")
    elif kind == "remove":
        if isinstance(parent, list):
            del parent[int(last)]
        elif last in parent:
            del parent[last]
        else:
            raise KustomizeError(f"remove: {op['path']} does not exist")
    elif kind in {"add", "replace"}:
        value = copy.deepcopy(op["value"])
        if isinstance(parent, list):
            if last == "-":
                parent.append(value)
            elif kind == "add":
                parent.insert(int(last), value)
            else:
                parent[int(last)] = value
        else:
            if kind == "replace" and last not in parent:
                raise KustomizeError(f"replace: {op['path']} does not exist")
            parent[last] = value
    else:
        raise KustomizeError(f"unsupported JSON patch op {kind!r}")


def pod_specs(obj: Obj) -> list[Obj]:
    """The pod specs inside a workload object (Deployment, DaemonSet, Job, CronJob, Pod...)."""
    spec = obj.get("spec", {})
    if obj["kind"] == "Pod":
        return [spec]
    if obj["kind"] == "CronJob":
        return [spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})]
    template = spec.get("template")
    return [template.get("spec", {})] if isinstance(template, dict) else []


def containers(obj: Obj) -> list[Obj]:
    return [
        c for spec in pod_specs(obj) for key in ("initContainers", "containers") for c in spec.get(key, [])
    ]


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """``name[:tag][@digest]`` -> (name, tag, digest); a port in the registry host is not a tag."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    return name, tag, digest or None


def _set_image(obj: Obj, rule: Obj) -> None:
    unknown = set(rule) - {"name", "newName", "newTag", "digest"}
    if unknown:
        raise KustomizeError(f"unsupported image keys {sorted(unknown)}")
    for container in containers(obj):
        name, tag, digest = split_image(container["image"])
        if name != rule["name"]:
            continue
        name = rule.get("newName", name)
        if "digest" in rule:
            tag, digest = None, rule["digest"]
        elif "newTag" in rule:
            tag, digest = str(rule["newTag"]), None
        container["image"] = name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
