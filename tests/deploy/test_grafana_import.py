"""The Grafana board imports through the UI (its ``DS_PROMETHEUS`` input) and through file provisioning.

No Grafana server installs from the registries this project uses (Debian, PyPI, npm), so the board is
checked against ``grafana_dashboard.schema.json``, a JSON Schema transcribed from Grafana's own dashboard
types (``@grafana/schema``; the schema's description says which), and the two ways of loading it are
replayed: the UI/API import (every ``${INPUT}`` string replaced by the chosen data source's uid,
``__inputs`` and ``__requires`` dropped, as Grafana's dashboard import does) and the ``sed`` copy that
docs/grafana.md prescribes for provisioning.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "deploy" / "grafana" / "phasefit.json"
SCHEMA = Path(__file__).with_name("grafana_dashboard.schema.json")
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources.yaml"
PROVIDER = ROOT / "deploy" / "grafana" / "provisioning" / "dashboards.yaml"
GUIDE = ROOT / "docs" / "grafana.md"
VARIABLE_REF = {"type": "prometheus", "uid": "${datasource}"}
_PLACEHOLDER = re.compile(r"\$\{(DS_[A-Z0-9_]+)\}")


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    return dict(json.loads(BOARD.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(validator: jsonschema.Draft202012Validator, board: dict[str, Any]) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(board)]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for top in board["panels"] for p in (top, *top.get("panels", []))]


def _datasource_variable(board: dict[str, Any]) -> dict[str, Any]:
    (variable,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    return dict(variable)


def grafana_import(board: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """What Grafana's dashboard import stores: each input's ``${NAME}`` replaced by its value in every
    string, the export wrapper removed; an input left without a value is refused."""
    for spec in board.get("__inputs", []):
        if spec["name"] not in values:
            raise ValueError(f"input {spec['name']} needs a value")

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return _PLACEHOLDER.sub(lambda m: values.get(m[1], m[0]), value)
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    return {k: fill(v) for k, v in board.items() if k not in ("__inputs", "__requires")}


# --- the schema ------------------------------------------------------------------------------------------


def test_the_board_validates_against_grafanas_dashboard_schema(
    board: dict[str, Any], validator: jsonschema.Draft202012Validator
) -> None:
    assert _errors(validator, board) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("schemaVersion",), "39"),
        (("panels", 1, "gridPos", "w"), 25),
        (("panels", 1, "gridPos"), {"x": 0, "y": 0, "w": 3}),
        (("panels", 0, "collapsed"), None),
        (("templating", "list", 1, "type"), "dropdown"),
        (("templating", "list", 1, "refresh"), 5),
        (("__inputs", 0, "pluginId"), None),
        (("panles",), []),
    ],
    ids=lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else None,
)
def test_the_schema_refuses_what_grafana_would(
    board: dict[str, Any], validator: jsonschema.Draft202012Validator, path: tuple[Any, ...], value: Any
) -> None:
    broken = copy.deepcopy(board)
    *parents, last = path
    node: Any = broken
    for key in parents:
        node = node[key]
    if value is None:
        del node[last]
    else:
        node[last] = value
    assert _errors(validator, broken), f"the schema accepts {path} = {value!r}"


def test_panel_ids_are_unique_and_every_panel_is_placed(board: dict[str, Any]) -> None:
    ids = [p["id"] for p in _panels(board)]
    assert len(ids) == len(set(ids))
    for panel in _panels(board):
        assert set(panel["gridPos"]) >= {"h", "w", "x", "y"}, panel.get("title")


# --- the import input ------------------------------------------------------------------------------------


def test_one_prometheus_input_as_grafana_exports_it(board: dict[str, Any]) -> None:
    assert next(iter(board)) == "__inputs", "Grafana's export puts __inputs first"
    (spec,) = board["__inputs"]
    assert spec["name"] == "DS_PROMETHEUS"
    assert (spec["type"], spec["pluginId"], spec["pluginName"]) == ("datasource", "prometheus", "Prometheus")
    assert spec["label"]


def test_the_input_is_the_data_source_variables_default_and_used_nowhere_else(board: dict[str, Any]) -> None:
    variable = _datasource_variable(board)
    assert variable["name"] == "datasource" and variable["query"] == "prometheus"
    assert variable["current"]["value"] == variable["current"]["text"] == "${DS_PROMETHEUS}"
    rest = copy.deepcopy(board)
    del rest["__inputs"]
    for candidate in rest["templating"]["list"]:
        if candidate["type"] == "datasource":
            candidate["current"] = {}
    stray = sorted({m for s in _strings(rest) for m in _PLACEHOLDER.findall(s)})
    assert stray == [], f"{stray}: panels read the Data source variable, not the input"


def test_every_placeholder_is_declared(board: dict[str, Any]) -> None:
    used = {m for s in _strings(board) for m in _PLACEHOLDER.findall(s)}
    declared = {spec["name"] for spec in board["__inputs"]}
    assert used == declared


def test_every_panel_target_and_query_variable_reads_the_data_source_variable(board: dict[str, Any]) -> None:
    for panel in _panels(board):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == VARIABLE_REF, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == VARIABLE_REF, panel["title"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == VARIABLE_REF, variable["name"]


def test_requires_names_every_plugin_the_board_uses(board: dict[str, Any]) -> None:
    required = {(r["type"], r["id"]) for r in board["__requires"]}
    used = {("panel", p["type"]) for p in _panels(board) if p["type"] != "row"}
    used |= {("datasource", "prometheus"), ("grafana", "grafana")}
    assert required == used


# --- loading it ------------------------------------------------------------------------------------------


def test_ui_import_points_the_board_at_the_chosen_data_source(
    board: dict[str, Any], validator: jsonschema.Draft202012Validator
) -> None:
    with pytest.raises(ValueError, match="DS_PROMETHEUS"):
        grafana_import(board, {})
    imported = grafana_import(board, {"DS_PROMETHEUS": "prom-uid-1"})
    assert "__inputs" not in imported and "__requires" not in imported
    assert _datasource_variable(imported)["current"]["value"] == "prom-uid-1"
    assert not any("${DS_" in s for s in _strings(imported))
    assert _errors(validator, imported) == []
    untouched = {k: v for k, v in board.items() if k not in ("__inputs", "__requires", "templating")}
    assert {k: imported[k] for k in untouched} == untouched, "only the input's value changes"


def _guide() -> str:
    return GUIDE.read_text(encoding="utf-8")


def test_the_guide_gives_ui_api_and_provisioning_steps() -> None:
    text = _guide()
    for step in ("Dashboards** > **New** > **Import", "Upload dashboard JSON file", "/api/dashboards/import"):
        assert step in text, step
    for path in re.findall(r"deploy/grafana/[\w./-]+", text):
        assert (ROOT / path).is_file(), f"docs/grafana.md names {path}, which does not exist"
    assert "DS_PROMETHEUS" in text and "phasefit-placement" in text


def test_the_provisioning_copy_names_the_provisioned_data_source(
    board: dict[str, Any], validator: jsonschema.Draft202012Validator
) -> None:
    """The guide's ``sed`` puts the provisioned data source's uid where the input was."""
    (source,) = yaml.safe_load(DATASOURCES.read_text(encoding="utf-8"))["datasources"]
    match = re.search(r"sed 's/\\\$\{DS_PROMETHEUS\}/([\w-]+)/g' deploy/grafana/phasefit\.json", _guide())
    assert match, "docs/grafana.md shows no sed for the provisioning copy"
    assert match[1] == source["uid"] and source["type"] == "prometheus"
    copied = json.loads(BOARD.read_text(encoding="utf-8").replace("${DS_PROMETHEUS}", match[1]))
    assert _errors(validator, copied) == []
    assert _datasource_variable(copied)["current"]["value"] == source["uid"]
    assert not any("${DS_" in s for s in _strings(copied))


def test_the_provider_reads_the_folder_the_guide_copies_into() -> None:
    (provider,) = yaml.safe_load(PROVIDER.read_text(encoding="utf-8"))["providers"]
    folder = provider["options"]["path"]
    assert f"> {folder}/phasefit.json" in _guide()
    for path in (DATASOURCES, PROVIDER):  # provisioning expands $VAR in these files: no placeholder there
        assert "${" not in path.read_text(encoding="utf-8"), path.name
