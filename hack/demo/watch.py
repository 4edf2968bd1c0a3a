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
    if ledger.get("evals"):
        newest = ledger["evals"][0]
        parts.append(f"eval@{newest['step']} pass@1 {newest['passAt1']:.3f}")
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
    curve_figure(curve).savefig(png)
    return text, png


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def curve_figure(curve: Curve):
    """Reward mean (left axis) and KL (right axis) per step, each with its values on its axis
    and both in one legend."""
    import matplotlib
    matplotlib.use("Agg")  # files only: the demo runs without a display
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    steps = sorted(curve.points)
    figure = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    reward_axis = figure.add_subplot()
    reward_axis.set_title("GRPO run: reward and KL per step")
    reward_axis.set_xlabel("optimizer step")
    reward_axis.set_ylabel("reward mean", color="tab:blue")
    reward_axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    reward_axis.grid(alpha=0.3)
    kl_axis = reward_axis.twinx()
    kl_axis.set_ylabel("KL to the reference", color="tab:red")
    lines = []
    for axis, index, label, colour in ((reward_axis, 0, "reward mean", "tab:blue"),
                                       (kl_axis, 1, "KL", "tab:red")):
        points = [(s, curve.points[s][index]) for s in steps
                  if curve.points[s][index] is not None]
        lines += axis.plot([s for s, _ in points], [v for _, v in points], marker="o",
                           color=colour, label=label)
    reward_axis.legend(handles=lines, loc="best")
    return figure


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
