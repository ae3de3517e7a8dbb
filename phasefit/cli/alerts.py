"""``phasefit alerts render|check``: Prometheus rules, the PrometheusRule resource, and their checks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phasefit.cli.output import emit_json, escape, fail, human

if TYPE_CHECKING:
    from alerts.check import CheckResult
    from alerts.config import RulesConfig
    from alerts.render import PrometheusRuleMeta

app = typer.Typer(
    help="Prometheus recording and alerting rules: render them (rule files, a PrometheusRule), check them.",
    no_args_is_help=True,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of text on stderr.")]


def _pairs(values: list[str], what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key.strip():
            fail(f"{what} {value!r} must look like KEY=VALUE")
        pairs[key.strip()] = rest
    return pairs


def _config(
    runbook_base_url: str | None,
    job_selectors: list[str],
    role_label: str | None,
    cluster_label: str | None,
    lost_tokens_share: float | None,
) -> RulesConfig:
    from dataclasses import replace

    from pydantic import ValidationError

    from alerts.rules_source import default_config
    from analyzer.settings import AnalyzerSettings
    from fleet.catalog import CatalogError, load_catalog
    from fleet.settings import Settings

    try:
        # The analyzer's bottleneck thresholds (PHASEFIT_ANALYZER_THRESHOLDS too) bound the placement alerts.
        bottleneck = AnalyzerSettings().params().bottleneck
        cfg = default_config(load_catalog(Settings().catalog_path).gpus, bottleneck)
        changes: dict[str, Any] = {}
        if runbook_base_url is not None:
            changes["runbook_base_url"] = runbook_base_url
        if role_label is not None:
            changes["dcgm_role_label"] = role_label
        if cluster_label is not None:
            changes["cluster_label"] = cluster_label
        if lost_tokens_share is not None:
            changes["lost_tokens_share"] = lost_tokens_share
        cfg = replace(cfg, **changes)
        return cfg.with_selectors(_pairs(job_selectors, "--job-selector"))
    except (CatalogError, ValidationError, ValueError) as exc:
        fail(str(exc))
        raise  # unreachable: fail() raises typer.Exit


def _meta(cr_labels: list[str], cr_namespace: str | None) -> PrometheusRuleMeta:
    from alerts.render import PrometheusRuleMeta

    default = PrometheusRuleMeta()
    labels = dict(default.labels) | _pairs(cr_labels, "--cr-label")
    return PrometheusRuleMeta(namespace=cr_namespace, labels=tuple(labels.items()))


@app.command("render")
def render(
    *,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write phasefit-*.yaml and phasefit-prometheusrule.yaml into DIR. Default: print them on "
            "stdout (YAML documents separated by ---) and write nothing.",
        ),
    ] = None,
    checkout: Annotated[
        bool,
        typer.Option(
            "--checkout",
            help="Write the committed files of a source checkout (alerts/rules/, deploy/prometheus/); "
            "--check without --out compares against them.",
        ),
    ] = False,
    runbook_base_url: Annotated[
        str | None,
        typer.Option(
            envvar="PHASEFIT_ALERTS_RUNBOOK_BASE_URL",
            help="Base URL of the runbooks; each alert links <base>/<alertname lowercased>.md.",
        ),
    ] = None,
    job_selector: Annotated[
        list[str] | None,
        typer.Option(
            "--job-selector",
            help="KEY=MATCHERS for KEY in collector, service, dcgm, engine, e.g. dcgm='job=\"gpu-metrics\"'. "
            "Repeat for several.",
        ),
    ] = None,
    role_label: Annotated[
        str | None,
        typer.Option(help="Label with the pod's prefill/decode role on DCGM series (default role)."),
    ] = None,
    cluster_label: Annotated[
        str | None, typer.Option(help="Label naming the cluster (default cluster).")
    ] = None,
    lost_tokens_share: Annotated[
        float | None,
        typer.Option(
            help="Share of token capacity lost to placement that fires PhasefitFleetLostTokensHigh."
        ),
    ] = None,
    cr_label: Annotated[
        list[str] | None,
        typer.Option(
            "--cr-label", help="KEY=VALUE label on the PrometheusRule, e.g. release=kube-prometheus-stack."
        ),
    ] = None,
    cr_namespace: Annotated[str | None, typer.Option(help="Namespace of the PrometheusRule.")] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if any output differs from the render.")
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Render the rule groups as Prometheus rule files and as a Kubernetes PrometheusRule."""
    from alerts.render import rendered_outputs
    from alerts.rules_source import rule_files

    cfg = _config(runbook_base_url, job_selector or [], role_label, cluster_label, lost_tokens_share)
    rules_dir, cr_path = _destination(out, to_files=out is not None or checkout or check)
    try:
        files = rule_files(cfg)
    except ValueError as exc:
        fail(str(exc))
        return
    outputs = rendered_outputs(
        files, rules_dir=rules_dir, prometheus_rule_path=cr_path, meta=_meta(cr_label or [], cr_namespace)
    )
    summary: dict[str, Any] = {
        "alerts": [a.alert for f in files for a in f.alerts],
        "recording_rules": [r.record for f in files for r in f.recording_rules],
    }
    if check:
        _check_current(outputs, json_output)
    elif out is None and not checkout:
        _print_documents(outputs, summary, json_output)
    else:
        _write(outputs, summary, json_output)


def _destination(out: Path | None, *, to_files: bool) -> tuple[Path, Path]:
    """Where the rule files and the PrometheusRule go (bare file names when they only reach stdout)."""
    from alerts.layout import RULES_DIR, checkout_prometheus_rule_path
    from alerts.render import PROMETHEUS_RULE_FILE

    if out is not None:
        return out, out / PROMETHEUS_RULE_FILE
    if not to_files:
        return Path(), Path(PROMETHEUS_RULE_FILE)
    cr_path = checkout_prometheus_rule_path()
    if cr_path is None:
        fail("no source checkout here (deploy/ not found): pass --out DIR")
        raise AssertionError("unreachable: fail() raises typer.Exit")
    return RULES_DIR, cr_path


def _check_current(outputs: dict[Path, str], json_output: bool) -> None:
    """``--check``: exit 1 if any output file is missing or differs from the render."""
    from alerts.render import stale_outputs

    stale = stale_outputs(outputs)
    if json_output:
        emit_json({"current": not stale, "stale": [str(p) for p in stale]})
    for path in stale:
        human().print(f"[red]out of date:[/] {escape(str(path))}")
    if stale:
        raise typer.Exit(1)
    human().print(f"{len(outputs)} rendered files are current")


def _print_documents(outputs: dict[Path, str], summary: dict[str, Any], json_output: bool) -> None:
    """No ``--out``: every rendered file on stdout, one YAML document each; no file is written."""
    if json_output:
        emit_json({"documents": {p.name: text for p, text in outputs.items()}, **summary})
        return
    for path, text in outputs.items():
        sys.stdout.write(f"---\n# {path.name}\n{text}")
        if not text.endswith("\n"):
            sys.stdout.write("\n")
    sys.stdout.flush()
    human().print(f"{len(summary['alerts'])} alerts, {len(summary['recording_rules'])} recording rules")


def _write(outputs: dict[Path, str], summary: dict[str, Any], json_output: bool) -> None:
    """``--out DIR`` or ``--checkout``: write the files whose content changed."""
    from alerts.render import write_outputs

    written = write_outputs(outputs)
    summary = {"files": [str(p) for p in outputs], "written": [str(p) for p in written], **summary}
    if json_output:
        emit_json(summary)
        return
    console = human()
    for path in outputs:
        console.print(f"{'wrote' if path in written else 'unchanged'} {path}", markup=False)
    console.print(f"{len(summary['alerts'])} alerts, {len(summary['recording_rules'])} recording rules")


@app.command("check")
def check(
    *,
    rules_dir: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Rule files to check (phasefit-*.yaml). Default: the shipped files, which are also "
            "unit-tested and compared against a fresh render.",
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Run promtool check rules / test rules, amtool check-config, and the rendered-files-current check."""
    from alerts import check as checks
    from alerts.layout import ALERTMANAGER_EXAMPLE, RULES_DIR, checkout_prometheus_rule_path, rule_test_files
    from alerts.render import PROMETHEUS_RULE_FILE, rendered_outputs
    from alerts.rules_source import default_config, rule_files
    from alerts.tools import ToolMissingError
    from fleet.catalog import load_catalog

    shipped = rules_dir is None
    directory = RULES_DIR if rules_dir is None else rules_dir
    files = sorted(p for p in directory.glob("*.yaml") if p.name != PROMETHEUS_RULE_FILE)
    if not files:
        fail(f"no rule files (*.yaml) in {directory}")
    cr = checkout_prometheus_rule_path() if shipped else directory / PROMETHEUS_RULE_FILE
    results: list[CheckResult] = []
    try:
        results.append(checks.check_rule_files(files))
        if cr is not None and cr.is_file():
            results.append(checks.check_prometheus_rule(cr))
        if shipped:
            results.append(checks.run_rule_tests(rule_test_files()))
            if cr is not None:
                expected = rendered_outputs(
                    rule_files(default_config(load_catalog().gpus)),
                    rules_dir=RULES_DIR,
                    prometheus_rule_path=cr,
                )
                results.append(checks.check_current(expected))
        results.append(checks.check_alertmanager(ALERTMANAGER_EXAMPLE))
    except ToolMissingError as exc:
        fail(str(exc))
    _report(results, json_output)


def _report(results: list[CheckResult], json_output: bool) -> None:
    if json_output:
        emit_json([{"check": r.name, "ok": r.ok, "detail": r.detail} for r in results])
    else:
        console = human()
        for r in results:
            console.print(f"{'[green]ok[/]' if r.ok else '[bold red]FAILED[/]'} {escape(r.name)}")
            if not r.ok:
                console.print(r.detail, markup=False, highlight=False)
    if not all(r.ok for r in results):
        raise typer.Exit(1)
