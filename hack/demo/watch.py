"""Following a GRPORun from its status, the way a user with kubectl would, and summing it up:
a progress line per change, the final status, and a reward/KL curve (PNG + text)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from grpo_operator.api.constants import GROUP, PLURAL, VERSION

TERMINAL = ("Succeeded", "Failed", "Cancelled")


@dataclass
class Curve:
    """Per-step reward mean and KL, as mirrored into status (a step the poll missed is absent)."""

    points: dict[int, tuple[float | None, float | None]] = field(default_factory=dict)

    def add(self, ledger: dict[str, Any]) -> None:
        step = ledger.get("completedSteps") or 0
        if step and step not in self.points:
            self.points[step] = (ledger.get("rewardMean"), ledger.get("kl"))


def curve_from_logs(logs: list[Path]) -> Curve:
    """Every step's figures, from the trainer's report lines in the drivers' logs, oldest
    attempt first (status holds only the latest step; the logs hold them all)."""
    from grpo_trainer.reporting import parse_report_line

    curve = Curve()
    lines = [line for log in logs for line in log.read_text(errors="replace").splitlines()]
    for line in lines:
        found = parse_report_line(line)
        if found:
            ledger = yaml.safe_load(found[0]).get("ledger") or {}
            step = ledger.get("completedSteps") or 0
            if step:
                curve.points[step] = (ledger.get("rewardMean"), ledger.get("kl"))
    return curve


def _line(elapsed: float, status: dict[str, Any]) -> str:
    ledger = status.get("ledger") or {}
    parts = [f"[{elapsed:5.0f}s] {status.get('phase', 'Pending'):<12}"]
    attempt = (status.get("recovery") or {}).get("attempt") or 0
    if attempt > 1:
        parts.append(f"attempt {attempt}")
    progress = status.get("progress") or {}
    if progress.get("activity") and status.get("phase") == "Running":
        parts.append(f"{progress['activity']:<19}")
    if ledger.get("plannedSteps"):
        parts.append(f"step {ledger.get('completedSteps', 0)}/{ledger['plannedSteps']}")
    if progress.get("eta"):
        parts.append(f"eta {progress['eta']}")
    for key, label, fmt in (("rewardMean", "reward", "{:.3f}"), ("kl", "kl", "{:.4f}"),
                            ("tokensPerSecond", "tok/s", "{:.0f}"),
                            ("generatedTokens", "tokens", "{}")):
        if ledger.get(key) is not None:
            parts.append(f"{label} {fmt.format(ledger[key])}")
    return "  ".join(parts)


def follow(api: client.ApiClient, namespace: str, name: str, timeout: float,
           out=print, on_status=None) -> tuple[dict[str, Any], Curve]:
    """Poll the run until it ended and its cleanup receipt is written (or ``timeout``);
    ``on_status(status)`` sees every poll."""
    custom = client.CustomObjectsApi(api)
    curve, last, started = Curve(), None, time.monotonic()
    status: dict[str, Any] = {}
    while time.monotonic() - started < timeout:
        status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                     name).get("status") or {}
        curve.add(status.get("ledger") or {})
        if on_status is not None:
            on_status(status)
        line = _line(time.monotonic() - started, status)
        if line.split("]", 1)[1] != (last or "]").split("]", 1)[1]:
            out(line)
            last = line
        terminal = status.get("terminal") or {}
        if status.get("phase") in TERMINAL and (terminal.get("cleanup")
                                                or "rayCluster" not in status.get("children", {})):
            break
        time.sleep(1.0)
    return status, curve


def final_report(status: dict[str, Any]) -> str:
    keep = {k: status[k] for k in ("phase", "ledger", "recovery", "terminal") if k in status}
    return yaml.safe_dump(keep, sort_keys=False)


def write_curve(curve: Curve, out_dir: Path) -> tuple[Path, Path]:
    """``curve.txt`` (a table) and ``curve.png`` (reward and KL per step) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    steps = sorted(curve.points)
    text = out_dir / "curve.txt"
    rows = ["step  reward_mean  kl"] + [
        f"{s:>4}  {_fmt(curve.points[s][0], '{:.4f}'):>11}  {_fmt(curve.points[s][1], '{:.5f}')}"
        for s in steps
    ]
    text.write_text("\n".join(rows) + "\n")
    png = out_dir / "curve.png"
    _plot(curve, steps, png)
    return text, png


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _plot(curve: Curve, steps: list[int], path: Path) -> None:
    from PIL import Image, ImageDraw

    width, height, margin = 640, 360, 48
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle([margin, margin // 2, width - margin // 2, height - margin], outline="black")
    draw.text((margin, 4), "reward mean (blue) and KL (red) per step", fill="black")
    if steps:
        x_of = _scale(min(steps), max(steps), margin, width - margin // 2)
        for index, colour in ((0, "blue"), (1, "red")):
            values = [(s, curve.points[s][index]) for s in steps
                      if curve.points[s][index] is not None]
            if not values:
                continue
            low, high = min(v for _, v in values), max(v for _, v in values)
            y_of = _scale(low, high, height - margin, margin // 2)
            points = [(x_of(s), y_of(v)) for s, v in values]
            if len(points) > 1:
                draw.line(points, fill=colour, width=2)
            for x, y in points:
                draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=colour)
            draw.text((width - margin * 3, height - margin + 6 + 12 * index),
                      f"{low:.3g}..{high:.3g}", fill=colour)
        for s in steps:
            draw.text((x_of(s) - 3, height - margin + 4), str(s), fill="black")
    image.save(path)


def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


# --- where the actors ran (DEMO=multinode) ------------------------------------------------------

_PLACEMENT = re.compile(r"placement (\w+): (\{.*\})\s*$")


def ray_pods(cluster, namespace: str, name: str) -> dict[str, str]:
    """IP -> name of the run's Ray pods that have one (its cluster's pods, for the summary)."""
    pods = client.CoreV1Api(cluster._admin).list_namespaced_pod(
        namespace, label_selector=f"ray.io/cluster={name}").items
    return {p.status.pod_ip: p.metadata.name for p in pods if p.status.pod_ip}


def placement_from_log(log: Path) -> tuple[str, dict] | None:
    """The trainer's ``placement <mode>: {...}`` line (``grpo_trainer.run``), if logged."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        found = _PLACEMENT.search(line)
        if found:
            return found[1], json.loads(found[2])
    return None


def describe_placement(placement: tuple[str, dict], pods: dict[str, str]) -> str:
    mode, where = placement
    lines = [f"placement ({mode}), from Ray's placement group table:"]
    for role, slots in (("engine", where["engines"]), ("learner rank", where["learners"])):
        for i, slot in enumerate(slots):
            pod = pods.get(slot["address"], "?")
            lines.append(f"  {role} {i}: pod {pod} ({slot['address']}, Ray node "
                         f"{slot['node'][:12]})")
    return "\n".join(lines)
