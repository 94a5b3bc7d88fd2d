"""The monitoring in deploy/: the Grafana dashboard and the Prometheus alerts name only metrics
durably serves, and each alert's runbook is a section of docs/how-to/operating.md."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "durably-dashboard.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DEPLOY_README = ROOT / "deploy" / "README.md"
OPERATING = ROOT / "docs" / "how-to" / "operating.md"

# Every metric durably serves, by type. Must match docs/reference/metrics.md (and
# durably/observability/metrics.py): a metric renamed or added there is renamed or added here.
METRICS = {
    "durably_runs_started": "counter",
    "durably_runs_claimed": "counter",
    "durably_runs_finished": "counter",
    "durably_step_attempts": "counter",
    "durably_step_retries": "counter",
    "durably_step_failures": "counter",
    "durably_compensations": "counter",
    "durably_run_failures": "counter",
    "durably_store_outages": "counter",
    "durably_store_available": "gauge",
    "durably_step_duration_seconds": "histogram",
    "durably_checkpoint_commit_seconds": "histogram",
    "durably_checkpoint_batch_size": "histogram",
    "durably_claim_seconds": "histogram",
    "durably_claim_size": "histogram",
    "durably_run_state_seconds": "histogram",
    "durably_runs": "gauge",
    "durably_dead_letters": "gauge",
    "durably_queue_depth": "gauge",
    "durably_queue_oldest_due_age_seconds": "gauge",
    "durably_oldest_in_flight_age_seconds": "gauge",
    "durably_breaker_open": "gauge",
    "durably_runs_lease_expired": "gauge",
    "durably_workers_live": "gauge",
    "durably_webhook_deliveries": "counter",
    "durably_webhook_deliveries_due": "gauge",
}
# The names a query can use: counters with `_total`, histograms' series, gauges as they are.
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
SERIES = {name + suffix for name, kind in METRICS.items() for suffix in SUFFIXES[kind]}

SEVERITIES = {"critical", "warning", "info"}
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def test_the_dashboard_parses_and_every_panel_queries() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "label_values(" in variables["workflow"]["definition"]
    panels = list(_panels(dashboard["panels"]))
    assert len(panels) >= 15
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
    assert len({p["id"] for p in _all_panels(dashboard["panels"])}) == len(
        list(_all_panels(dashboard["panels"]))
    ), "panel ids repeat"


def test_every_alert_is_complete() -> None:
    rules = _rules()
    assert len(rules) >= 8
    names = [rule["alert"] for rule in rules]
    assert len(set(names)) == len(names), "alert names repeat"
    for rule in rules:
        assert rule["expr"].strip(), rule["alert"]
        assert DURATION.match(str(rule["for"])), f"{rule['alert']}: for {rule['for']!r}"
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        for key in ("summary", "description", "runbook_url"):
            assert rule["annotations"][key].strip(), f"{rule['alert']} has no {key}"


def test_every_query_names_only_metrics_durably_serves() -> None:
    exprs = [
        t["expr"]
        for p in _panels(json.loads(DASHBOARD.read_text())["panels"])
        for t in p["targets"]
    ]
    exprs += [rule["expr"] for rule in _rules()]
    named: set[str] = set()
    for expr in exprs:
        assert _unknown_series(expr) == set(), expr
        assert _balanced(expr), f"unbalanced brackets or quotes in {expr!r}"
        named |= _series(expr)
    # the dashboard shows every metric durably serves
    assert {_metric(series) for series in named} == set(METRICS)


def test_the_check_of_metric_names_catches_mistakes() -> None:
    assert _unknown_series('sum(rate(durably_runs_finished_total{status="failed"}[5m]))') == set()
    assert _unknown_series("rate(durably_run_finished_total[5m])") == {"durably_run_finished_total"}
    assert _unknown_series("rate(durably_step_attempts[5m])") == {"durably_step_attempts"}
    assert _unknown_series("durably_queue_depth_total") == {"durably_queue_depth_total"}
    assert _unknown_series('x{job="durably"}') == set()
    assert not _balanced("sum(rate(x[5m])")
    assert not _balanced('x{a="b}')


def test_every_runbook_is_a_section_of_operating() -> None:
    anchors = _anchors(OPERATING.read_text())
    for rule in _rules():
        path, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert path == "docs/how-to/operating.md", rule["alert"]
        assert anchor in anchors, f"{rule['alert']}: operating.md has no heading #{anchor}"


def test_deploy_readme_links_to_sections_that_exist() -> None:
    anchors = _anchors(OPERATING.read_text())
    links = re.findall(r"\]\([./]*docs/how-to/operating\.md#([^)]+)\)", DEPLOY_README.read_text())
    assert links
    assert [link for link in links if link not in anchors] == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Reading a run's state", "reading-a-runs-state"),
        ("`Throttled` slows the rate limit", "throttled-slows-the-rate-limit"),
        ("Stop a worker: SIGTERM", "stop-a-worker-sigterm"),
        ("DurablyQueueBackingUp", "durablyqueuebackingup"),
        ("2. Scrape them", "2-scrape-them"),
    ],
)
def test_anchors_are_github_slugs(heading: str, anchor: str) -> None:
    assert _anchors(f"# Title\n\n## {heading}\n") == {"title", anchor}


def test_anchors_skip_code_and_number_repeats() -> None:
    text = "## Retry\n\n```python\n# not a heading\n```\n\n## Retry\n"
    assert _anchors(text) == {"retry", "retry-1"}


# -- helpers ------------------------------------------------------------------------------


def _all_panels(panels: list[dict[str, Any]]) -> Any:
    for panel in panels:
        yield panel
        yield from _all_panels(panel.get("panels", []))  # a collapsed row holds its own


def _panels(panels: list[dict[str, Any]]) -> Any:
    """Every panel that shows data: rows are only headings."""
    return (p for p in _all_panels(panels) if p["type"] != "row")


def _rules() -> list[dict[str, Any]]:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads alerts.yml")
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _series(expr: str) -> set[str]:
    return set(re.findall(r"durably_[a-z_]+", expr))


def _metric(series: str) -> str:
    return re.sub(r"_(bucket|sum|count|total)$", "", series)


def _unknown_series(expr: str) -> set[str]:
    """The durably_ names in `expr` that are no series durably serves: an unknown metric, or a
    known one with the wrong suffix (a counter without `_total`, a gauge with one)."""
    return {name for name in _series(expr) if name not in SERIES}


def _balanced(expr: str) -> bool:
    pairs, stack, quoted = {")": "(", "]": "[", "}": "{"}, [], False
    for char in expr:
        if char == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif char in "([{":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            return False
    return not stack and not quoted


def _anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of `markdown` (outside code blocks)."""
    anchors: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6} +(.+?) *#* *$", line)
        if fenced or heading is None:
            continue
        slug = _slug(heading.group(1))
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def _slug(heading: str) -> str:
    """GitHub's: lower case, punctuation dropped (but `-` and `_`), spaces made `-`."""
    text = heading.strip().lower()
    kept = (c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return "".join(kept).replace(" ", "-")
