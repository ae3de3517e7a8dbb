"""The "Latency targets" section of docs/configuration.md: the rules' keys, where they are written, how one
is chosen per pool. The examples are checked by the tests (they load as written)."""

from __future__ import annotations

from fleet.targets import MATCH_KEYS, TARGET_KEYS

TITLE = "Latency targets"

EXAMPLE_ENV = (
    '[{"model": "llama-3.1-70b", "tpot_p90_s": 0.05, "ttft_p90_s": 1.0}, '
    '{"cluster": "east", "deployment": "chat", "model": "llama-3.1-70b", "tpot_p90_s": 0.03}]'
)

EXAMPLE_CATALOG = """\
targets:
  - tpot_p90_s: 0.08                       # every pool
  - cluster: east
    model: meta-llama/Llama-3.1-8B-Instruct  # the served id, or the catalog key llama-3.1-8b
    ttft_p90_s: 0.5
    tpot_p90_s: 0.04
    e2e_p90_s: 20
"""


def render_targets() -> str:
    """The section's markdown."""
    keys = ", ".join(f"`{k}`" for k in MATCH_KEYS)
    targets = ", ".join(f"`{k}`" for k in TARGET_KEYS)
    lines = [
        "Per-pool latency targets, in seconds at the 90th percentile. A rule names the pools it is for by",
        f"any of {keys} (none: every pool) and sets at least one of",
        f"{targets}. `cluster` and `deployment` match the pool's exactly. `model` matches",
        "the pool's served model id (case ignored), or any name of its catalog model (key, HF id or alias):",
        "a catalog name matches every pool the catalog resolves to that model (Llama 3.1 and 3.3 70B",
        "alike), and the served id is the more specific. A pool's TPOT target sizes its decode batches",
        "(the largest batch whose step meets it, docs/analyzer.md#goodput), so its decode capacity is what",
        "it serves within the target. Its TTFT target holds each prefill worker to the load at which its",
        "queue keeps the p90 time to first token within it, or to the load the pool's prefill workers were",
        "seen serving within it where that is higher (docs/analyzer.md#goodput). Capacity, the best split,",
        "the loss and the what-ifs then count goodput. An end-to-end target is reported with the pool but",
        "does not change its capacity.",
        "",
        "Rules are written in three places:",
        "",
        "- `PHASEFIT_ANALYZER_TARGETS`, a JSON list, e.g.",
        f"  `PHASEFIT_ANALYZER_TARGETS='{EXAMPLE_ENV}'`;",
        "- a `targets:` list in the operator catalog file (`PHASEFIT_CATALOG_PATH`), beside `gpus:`,",
        "  `models:` and `engines:`:",
        "",
        "```yaml",
        EXAMPLE_CATALOG.rstrip("\n"),
        "```",
        "",
        "- `PHASEFIT_ANALYZER_TPOT_SLO_S` (or the threshold `pool.capacity.tpot_slo_s`): the fleet-wide TPOT",
        "  default, the least specific rule of all.",
        "",
        "One rule applies to a pool, whole: of the rules that match it, the one with the most match keys;",
        "at an equal count, one whose `model` is the pool's served id over one naming its catalog model;",
        "then a settings rule over a catalog rule over the global default. A target the chosen rule leaves",
        "unset is unset for that pool, whatever a less specific rule sets (a rule that gives a pool only a",
        "TTFT target leaves it without a TPOT one). Two rules of one place with the same match keys and",
        "values are refused at start, naming both; two that still tie for a pool (`cluster: east` and",
        "`model: x` for pool `east/x`) resolve to the one listed first, and the pool's notes say so. An",
        "unknown key, a target that is not a positive finite number, or a rule without a target is refused",
        "at start with the rule named (`PHASEFIT_ANALYZER_TARGETS[1]`, `<catalog file>: targets[0]`).",
        "",
        "`phasefit analyze --json` reports each pool's `targets`: the three figures (null where unset),",
        "their `source` (`settings`, `catalog`, `global` or `none`) and the `rule` they come from; the",
        "human output lists them under the pools. With no rule anywhere the analysis is as before and",
        'says so once: "no latency targets set: capacity is raw throughput".',
    ]
    return "\n".join(lines) + "\n"
