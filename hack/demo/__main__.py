"""``python -m demo`` (``make demo``): start the local cluster with KubeRay and the operator,
apply ``examples/tiny-cpu.yaml``, follow the run to its end while the real trainer trains a
tiny model on the CPU, print the final status and a reward/KL curve, stop everything.

Everything is kept under ``.demo/`` (the cluster's logs, the operator's log, the curve), so a
failed demo can be looked into afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from demo import inputs, watch
from localcluster import LocalCluster
from localcluster.processes import free_port

WORK = inputs.REPO / ".demo"
RECOVERY_STEPS = 16


@contextlib.contextmanager
def operator(kubeconfig: Path, log_path: Path):
    """The operator as its own process, as in its Deployment, until the block ends."""
    port = free_port()
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "grpo_operator", "--liveness",
             f"http://127.0.0.1:{port}/healthz"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the operator did not start; see {log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    break
            except OSError:
                time.sleep(0.3)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)


class DriverKiller:
    """``DEMO=recovery``: once the trainer has checkpointed step ``after_steps`` (seen on the
    checkpoint volume, sooner than in status), delete the first attempt's driver pod, as a
    node drain would."""

    def __init__(self, api, namespace: str, name: str, after_steps: int, checkpoints: Path):
        from kubernetes import client

        self.core = client.CoreV1Api(api)
        self.namespace, self.job, self.after = namespace, f"{name}-a1", after_steps
        self.checkpoints = checkpoints
        self.done = False

    def _checkpointed(self) -> int:
        from grpo_operator.api.checkpoint_layout import parse_step_dir_name

        steps = [parse_step_dir_name(p.name) for p in self.checkpoints.glob("*/step_*")]
        return max((s for s in steps if s is not None), default=0)

    def __call__(self, status: dict) -> None:
        steps = self._checkpointed()
        if self.done or steps < self.after:
            return
        for pod in self.core.list_namespaced_pod(
            self.namespace, label_selector=f"job-name={self.job}"
        ).items:
            if pod.status.phase == "Running":
                self.core.delete_namespaced_pod(pod.metadata.name, self.namespace)
                print(f"        --- deleted the driver pod {pod.metadata.name} after checkpoint "
                      f"step_{steps}: the operator should resume from the last checkpoint ---")
                self.done = True


def run(cluster: LocalCluster, run_body: dict, work: Path, timeout: float,
        namespace: str = "default", kill_driver_after: int | None = None) -> int:
    """Apply the run on a cluster whose operator is running; follow it; sum it up. With
    ``kill_driver_after``, delete the driver pod once that many steps are done."""
    import yaml

    name = run_body["metadata"]["name"]
    print(f"preparing the tiny model and dataset in {inputs.host_dirs(run_body)['model'].parent}")
    inputs.prepare(run_body)
    cluster.kubectl("apply", "--server-side", "-n", namespace, "-f", "-",
                    input=yaml.safe_dump(run_body))
    print(f"applied GRPORun {namespace}/{name}; following its status:")
    api = cluster.api_client()
    killer = None if kill_driver_after is None else DriverKiller(
        api, namespace, name, kill_driver_after, inputs.host_dirs(run_body)["checkpoints"])
    try:
        status, curve = watch.follow(api, namespace, name, timeout, on_status=killer)
    finally:
        api.close()
    print("\nfinal status:\n" + watch.final_report(status))
    attempts = (status.get("recovery") or {}).get("attempt") or 1
    logs = [cluster.driver_runner.job_log(namespace, f"{name}-a{a}")
            for a in range(1, attempts + 1)]
    if any(logs):
        curve = watch.curve_from_logs([log for log in logs if log is not None])
    text, png = watch.write_curve(curve, work)
    print(text.read_text())
    print(f"curve: {png}")
    if status.get("phase") != "Succeeded":
        driver_logs = "\n".join(f"  driver/trainer log: {log}" for log in logs if log)
        print(f"the run did not succeed (phase {status.get('phase')}); look at:\n"
              f"{driver_logs}\n  operator log: {work / 'operator.log'}\n"
              f"  cluster logs: {cluster.root / 'logs'}", file=sys.stderr)
        return 1
    if attempts > 1:
        recovery = status["recovery"]
        print(f"recovered: {attempts} attempts ("
              + ", ".join(f"{h['attempt']}: {h['reason']} from step {h['fromStep']}"
                          for h in recovery["history"])
              + f"); the last one resumed from step {recovery.get('resumedFromStep')}")
    print(cluster.kubectl("get", "grpo", "-n", namespace).stdout)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds to wait for the run (default: %(default)s)")
    parser.add_argument("--mode", choices=["run", "recovery"], default="run",
                        help="recovery: delete the driver pod after step 2 and watch the run "
                        "resume from its checkpoint on the same RayCluster")
    args = parser.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    print("starting the local cluster (etcd, kube-apiserver, controller-manager, scheduler, "
          "KWOK GPU nodes, KubeRay)...")
    cluster = LocalCluster.start(WORK / "cluster")
    try:
        print(f"cluster ready in {cluster.timings['total']:.0f}s; installing the CRD and "
              "starting the operator")
        cluster.install_crd(inputs.REPO / "crds" / "grporuns.grpo.dev.yaml")
        with operator(cluster.kubeconfig, WORK / "operator.log"):
            example = inputs.load_example()
            if args.mode == "recovery":
                # Steps take about a second here: a longer run leaves time to interrupt it.
                example["spec"]["algorithm"]["maxSteps"] = RECOVERY_STEPS
            return run(cluster, example, WORK, args.timeout,
                       kill_driver_after=2 if args.mode == "recovery" else None)
    finally:
        print("stopping the local cluster")
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
