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


def run(cluster: LocalCluster, run_body: dict, work: Path, timeout: float,
        namespace: str = "default") -> int:
    """Apply the run on a cluster whose operator is running; follow it; sum it up."""
    import yaml

    name = run_body["metadata"]["name"]
    print(f"preparing the tiny model and dataset in {inputs.host_dirs(run_body)['model'].parent}")
    inputs.prepare(run_body)
    cluster.kubectl("apply", "--server-side", "-n", namespace, "-f", "-",
                    input=yaml.safe_dump(run_body))
    print(f"applied GRPORun {namespace}/{name}; following its status:")
    api = cluster.api_client()
    try:
        status, curve = watch.follow(api, namespace, name, timeout)
    finally:
        api.close()
    print("\nfinal status:\n" + watch.final_report(status))
    driver_log = cluster.driver_runner.job_log(namespace, f"{name}-a1")
    if driver_log is not None:
        curve = watch.curve_from_log(driver_log)
    text, png = watch.write_curve(curve, work)
    print(text.read_text())
    print(f"curve: {png}")
    if status.get("phase") != "Succeeded":
        print(f"the run did not succeed (phase {status.get('phase')}); look at:\n"
              f"  driver/trainer log: {driver_log}\n  operator log: {work / 'operator.log'}\n"
              f"  cluster logs: {cluster.root / 'logs'}", file=sys.stderr)
        return 1
    print(cluster.kubectl("get", "grpo", "-n", namespace).stdout)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds to wait for the run (default: %(default)s)")
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
            return run(cluster, inputs.load_example(), WORK, args.timeout)
    finally:
        print("stopping the local cluster")
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
