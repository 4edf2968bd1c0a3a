"""The chart's Grafana dashboard as the PromQL it sends: every panel target's ``expr`` with the
dashboard's template variables replaced, so a test can put each query to a real Prometheus."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

DASHBOARD_PATH = (Path(__file__).resolve().parents[2] / "charts" / "grpo-operator"
                  / "dashboards" / "grpo-operator.json")

# Grafana's forms of a variable reference: $name, ${name}, ${name:format}, [[name]].
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def load_dashboard(path: Path = DASHBOARD_PATH) -> dict:
    return json.loads(path.read_text())


def panels(dashboard: dict) -> Iterator[dict]:
    """Every panel but the rows, those inside a collapsed row included."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def substitute(text: str, variables: dict[str, str]) -> str:
    """``text`` with each variable reference replaced by its value in ``variables`` (keyed by
    the name without ``$``, e.g. ``__rate_interval``); a variable it lacks raises KeyError, so
    a query never reaches Prometheus with a ``$`` in it."""

    def value(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group is not None)
        if name not in variables:
            raise KeyError(f"no value for the dashboard variable ${name} in {text!r}")
        return variables[name]

    return _VARIABLE.sub(value, text)


def dashboard_queries(dashboard: dict, variables: dict[str, str]) -> list[str]:
    """The ``expr`` of every panel target, in panel order, with the template variables
    substituted, e.g. ``{"namespace": ".*", "run": ".*", "__rate_interval": "1m",
    "datasource": "prometheus"}`` (regex matchers take ``.*`` for "All")."""
    return [substitute(target["expr"], variables)
            for panel in panels(dashboard) for target in panel.get("targets", [])]
