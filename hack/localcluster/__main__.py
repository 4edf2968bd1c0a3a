"""``python -m localcluster up|down|status`` — the local cluster outside of pytest.

``up`` starts the cluster in the background (a supervisor process that owns every component
and the driver-pod runner), writes ``<dir>/kubeconfig`` and returns once it is ready;
``down`` stops it. ``<dir>`` is ``.cluster`` unless ``--dir`` says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .cluster import LocalCluster


def _pid(directory: Path) -> int | None:
    try:
        pid = int((directory / "pid").read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def _serve(directory: Path) -> None:
    """The supervisor: start, announce readiness, then wait for SIGTERM."""
    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    cluster = LocalCluster.start(directory)
    try:
        (directory / "ready").write_text(json.dumps(cluster.timings))
        while not stop:
            time.sleep(0.5)
    finally:
        cluster.stop()
        (directory / "ready").unlink(missing_ok=True)
        (directory / "pid").unlink(missing_ok=True)


def up(directory: Path) -> int:
    if _pid(directory):
        print(f"already running; KUBECONFIG={directory / 'kubeconfig'}")
        return 0
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    with (directory / "supervisor.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "localcluster", "serve", "--dir", str(directory)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        )
    (directory / "pid").write_text(str(proc.pid))
    while not (directory / "ready").exists():
        if proc.poll() is not None:
            print((directory / "supervisor.log").read_text()[-4000:], file=sys.stderr)
            print(f"the local cluster failed to start; logs in {directory}/logs", file=sys.stderr)
            return 1
        time.sleep(0.5)
    timings = json.loads((directory / "ready").read_text())
    kubectl = LocalCluster.tools_bin("kubectl")
    print(f"local cluster ready in {timings['total']:.1f}s (logs: {directory}/logs)")
    print(f"  export KUBECONFIG={directory.resolve() / 'kubeconfig'}")
    print(f"  {kubectl} get nodes")
    return 0


def down(directory: Path) -> int:
    pid = _pid(directory)
    if pid is None:
        print("not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    for _ in range(120):
        if _pid(directory) is None:
            break
        time.sleep(0.5)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    print("local cluster stopped")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="localcluster")
    parser.add_argument("command", choices=["up", "down", "serve"])
    parser.add_argument("--dir", type=Path, default=Path(".cluster"))
    args = parser.parse_args()
    directory = args.dir.resolve()
    if args.command == "serve":
        _serve(directory)
        return 0
    return {"up": up, "down": down}[args.command](directory)


if __name__ == "__main__":
    sys.exit(main())
