"""Validate Kubernetes objects against the API schemas carried by the ``kubernetes`` Python client.

``ApiClient().deserialize`` builds the typed model (``V1DaemonSet``...) and rejects missing required fields,
but silently drops unknown keys and coerces "9401" into 9401. So each object is also walked against the
models' ``openapi_types`` / ``attribute_map``: an unknown key (a typo such as ``readOnlyRootFileSystem``) or
a value of the wrong type is an error with its path. Custom resources (Prometheus Operator) are checked
against small hand-written schemas of the fields phasefit uses, in the same notation.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import kubernetes.client as k8s
from kubernetes.client import ApiClient

from tests.deploy.deploy_kustomize import containers

# Hand-written schemas use the client's notation: "str", "int", "bool", "object", "List[T]",
# "Dict[str, T]", a V1* model name, or a dict {field: type} for a nested object. Required fields end in "!".
_ENDPOINT = {
    "port": "str",
    "targetPort": "object",
    "path": "str",
    "scheme": "str",
    "interval": "str",
    "scrapeTimeout": "str",
    "honorLabels": "bool",
    "relabelings": "List[Relabeling]",
    "metricRelabelings": "List[Relabeling]",
    "authorization": {"type": "str", "credentials": "V1SecretKeySelector"},
}
_MONITOR_COMMON = {
    "jobLabel": "str",
    "selector!": "V1LabelSelector",
    "namespaceSelector": {"any": "bool", "matchNames": "List[str]"},
    "podTargetLabels": "List[str]",
    "sampleLimit": "int",
}
CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        **_MONITOR_COMMON,
        "endpoints!": "List[Endpoint]",
        "targetLabels": "List[str]",
    },
    ("monitoring.coreos.com/v1", "PodMonitor"): {**_MONITOR_COMMON, "podMetricsEndpoints!": "List[Endpoint]"},
    ("monitoring.coreos.com/v1", "PrometheusRule"): {"groups!": "List[RuleGroup]"},
}
CRD_TYPES: dict[str, dict[str, Any]] = {
    "Endpoint": _ENDPOINT,
    "Relabeling": {
        "sourceLabels": "List[str]",
        "separator": "str",
        "targetLabel": "str",
        "regex": "str",
        "modulus": "int",
        "replacement": "str",
        "action": "str",
    },
    "RuleGroup": {
        "name!": "str",
        "interval": "str",
        "query_offset": "str",
        "limit": "int",
        "partial_response_strategy": "str",
        "labels": "Dict[str, str]",
        "rules!": "List[Rule]",
    },
    "Rule": {
        "alert": "str",
        "record": "str",
        "expr!": "str",
        "for": "str",
        "keep_firing_for": "str",
        "labels": "Dict[str, str]",
        "annotations": "Dict[str, str]",
    },
}

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_DURATION = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)


def model_name(api_version: str, kind: str) -> str:
    """``apps/v1`` + ``DaemonSet`` -> ``V1DaemonSet``; ``autoscaling/v2`` -> ``V2...``."""
    version = api_version.rpartition("/")[2]
    return version[0].upper() + version[1:] + kind


def validate(obj: dict[str, Any]) -> list[str]:
    """Every problem found in one object, as 'Kind/name: path: message' strings (empty when valid)."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    name = obj.get("metadata", {}).get("name", "?")
    where = f"{kind}/{name}"
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return [f"{where}: apiVersion and kind are required strings"]
    errors: list[str] = []
    crd = CRD_SCHEMAS.get((api_version, kind))
    if crd is not None:
        schema = {"apiVersion!": "str", "kind!": "str", "metadata!": "V1ObjectMeta", "spec!": crd}
        _walk(obj, schema, where, errors)
    else:
        type_name = model_name(api_version, kind)
        if not hasattr(k8s, type_name):
            return [f"{where}: no schema for {api_version} {kind} (not a built-in kind nor a known CRD)"]
        try:
            ApiClient().deserialize(json.dumps(obj), type_name, "application/json")
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError: required fields, strict types
            errors.append(f"{where}: {' '.join(str(exc).split())}")
        _walk(obj, type_name, where, errors)
    errors.extend(f"{where}: {e}" for e in _semantic_checks(obj))
    return errors


def _walk(value: Any, schema: Any, path: str, errors: list[str]) -> None:
    if isinstance(schema, dict):
        _walk_fields(value, schema, path, errors)
        return
    if schema in CRD_TYPES:
        _walk_fields(value, CRD_TYPES[schema], path, errors)
        return
    if schema.startswith("Optional["):
        if value is not None:
            _walk(value, schema[9:-1], path, errors)
        return
    if schema.startswith(("list[", "List[")):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for index, item in enumerate(value):
            _walk(item, schema[5:-1], f"{path}[{index}]", errors)
        return
    if schema.startswith(("dict(", "Dict[")):
        inner = schema[5:-1].split(",", 1)[1].strip()
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping, got {type(value).__name__}")
            return
        for key, item in value.items():
            if not isinstance(key, str):
                errors.append(f"{path}: key {key!r} is not a string")
            _walk(item, inner, f"{path}.{key}", errors)
        return
    primitive = _PRIMITIVES.get(schema)
    if primitive is not None:
        if not primitive(value):
            errors.append(f"{path}: expected {schema}, got {type(value).__name__} {value!r}")
        return
    model = getattr(k8s, schema, None)
    if model is None:
        errors.append(f"{path}: unknown schema type {schema}")
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a {schema} mapping, got {type(value).__name__}")
        return
    by_json = {json_key: model.openapi_types[attr] for attr, json_key in model.attribute_map.items()}
    fields = getattr(model, "model_fields", {})
    for attr, json_key in model.attribute_map.items():
        if attr in fields and fields[attr].is_required() and json_key not in value:
            errors.append(f"{path}: required field {json_key!r} missing for {schema}")
    for key, item in value.items():
        if key not in by_json:
            errors.append(f"{path}: unknown field {key!r} for {schema}")
            continue
        _walk(item, by_json[key], f"{path}.{key}", errors)


def _walk_fields(value: Any, fields: dict[str, Any], path: str, errors: list[str]) -> None:
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a mapping, got {type(value).__name__}")
        return
    spec = {name.rstrip("!"): (schema, name.endswith("!")) for name, schema in fields.items()}
    for name, (_, required) in spec.items():
        if required and name not in value:
            errors.append(f"{path}: required field {name!r} missing")
    for key, item in value.items():
        if key not in spec:
            errors.append(f"{path}: unknown field {key!r} (not in phasefit's schema of this custom resource)")
            continue
        _walk(item, spec[key][0], f"{path}.{key}", errors)


_PRIMITIVES: dict[str, Any] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "object": lambda v: v is not None,
    "datetime": lambda v: isinstance(v, (str, datetime.datetime)),
    "date": lambda v: isinstance(v, (str, datetime.date)),
}


def _semantic_checks(obj: dict[str, Any]) -> list[str]:
    """A few of the API server's validation rules that the schema alone does not express."""
    errors: list[str] = []
    meta = obj.get("metadata", {})
    name = meta.get("name", "")
    if not (isinstance(name, str) and len(name) <= 253 and _DNS_SUBDOMAIN.match(name)):
        errors.append(f"metadata.name {name!r} is not a DNS-1123 subdomain")
    for where in ("labels", "annotations"):
        for key, value in (meta.get(where) or {}).items():
            prefix, _, label = key.rpartition("/")
            if (
                (prefix and not _DNS_SUBDOMAIN.match(prefix))
                or not _LABEL_NAME.match(label)
                or len(label) > 63
            ):
                errors.append(f"metadata.{where} key {key!r} is invalid")
            if where == "labels" and not (
                isinstance(value, str) and len(value) <= 63 and _LABEL_VALUE.match(value)
            ):
                errors.append(f"metadata.labels[{key!r}] value {value!r} is invalid")
    for container in containers(obj):
        cname = container.get("name", "")
        if not (len(cname) <= 63 and _DNS_LABEL.match(cname)):
            errors.append(f"container name {cname!r} is not a DNS-1123 label")
        for port in container.get("ports", []):
            pname = port.get("name")
            if pname is not None and not (len(pname) <= 15 and _PORT_NAME.match(pname)):
                errors.append(f"container {cname}: port name {pname!r} is not an IANA service name (<= 15)")
        for section in ("requests", "limits"):
            for resource, amount in (container.get("resources", {}).get(section) or {}).items():
                if not (isinstance(amount, str) and _QUANTITY.match(amount)):
                    errors.append(f"container {cname}: {section}.{resource} {amount!r} is not a quantity")
    if obj.get("apiVersion") == "monitoring.coreos.com/v1":
        errors.extend(_duration_checks(obj.get("spec", {})))
    return errors


def _duration_checks(spec: dict[str, Any]) -> list[str]:
    errors = []
    endpoints = spec.get("endpoints", []) + spec.get("podMetricsEndpoints", [])
    for endpoint in endpoints:
        for key in ("interval", "scrapeTimeout"):
            if key in endpoint and not _DURATION.match(endpoint[key]):
                errors.append(f"{key} {endpoint[key]!r} is not a Prometheus duration")
    for group in spec.get("groups", []):
        for rule in group.get("rules", []):
            if ("alert" in rule) == ("record" in rule):
                errors.append(f"rule group {group.get('name')}: a rule needs exactly one of alert/record")
            for key in ("for", "keep_firing_for"):
                if key in rule and not _DURATION.match(rule[key]):
                    errors.append(
                        f"rule {rule.get('alert')}: {key} {rule[key]!r} is not a Prometheus duration"
                    )
    return errors
