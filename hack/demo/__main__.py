"""``python -m demo`` (``make demo``): start the local cluster with KubeRay and the operator,
apply ``examples/tiny-cpu.yaml``, follow the run to its end while the real trainer trains a
tiny model on the CPU, print the final status and a reward/KL curve, stop everything.
``--mode recovery`` deletes the driver pod after a checkpoint; ``--mode multinode`` runs the
example on two Ray worker pods (engine on one, learner on the other) and shows where each
actor ran.

Everything is kept under ``.demo/`` (the cluster's logs, the operator's log, the curve), so a
failed demo can be looked into afterwards.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from demo import inputs, watch
from demo.driving import KILL_AFTER_STEPS, apply_and_follow, for_multinode, for_recovery
from localcluster import LocalCluster
from localcluster.operator_process import OperatorProcess

WORK = inputs.REPO / ".demo"


def run(cluster: LocalCluster, run_body: dict, work: Path, timeout: float,
        namespace: str = "default", kill_driver_after: int | None = None) -> int:
    """Apply the run on a cluster whose operator is running; follow it; sum it up. With
    ``kill_driver_after``, delete the driver pod once that many steps are done."""
    name = run_body["metadata"]["name"]
    print(f"preparing the tiny model and dataset in {inputs.host_dirs(run_body)['model'].parent}")
    inputs.prepare(run_body)
    pods: dict[str, str] = {}  # Ray pod IP -> name, as seen while the run goes
    status, curve, _ = apply_and_follow(cluster, run_body, timeout, namespace, kill_driver_after,
                                        on_status=lambda _: pods.update(
                                            watch.ray_pods(cluster, namespace, name)))
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
    placement = next((watch.placement_from_log(log) for log in reversed(logs) if log), None)
    if placement and len(pods) > 1:
        print(watch.describe_placement(placement, pods))
    if attempts > 1:
        recovery = status["recovery"]
        print(f"recovered: {attempts} attempts ("
              + ", ".join(f"{h['attempt']}: {h['reason']} from step {h['fromStep']}"
                          for h in recovery["history"])
              + f"); the last one resumed from step {recovery.get('resumedFromStep')}")
    print(cluster.kubectl("get", "grpo", "-n", namespace, "-o", "wide").stdout)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds to wait for the run (default: %(default)s)")
    parser.add_argument("--mode", choices=["run", "recovery", "multinode"], default="run",
                        help="recovery: delete the driver pod after step 2 and watch the run "
                        "resume from its checkpoint on the same RayCluster; multinode: two "
                        "Ray worker pods, the engine on one and the learner on the other")
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
        example = inputs.load_example()
        with OperatorProcess(cluster, WORK / "operator.log",
                             env=inputs.operator_settings(inputs.host_root(example))):
            if args.mode == "recovery":
                return run(cluster, for_recovery(example), WORK, args.timeout,
                           kill_driver_after=KILL_AFTER_STEPS)
            if args.mode == "multinode":
                return run(cluster, for_multinode(example), WORK, args.timeout)
            return run(cluster, example, WORK, args.timeout)
    finally:
        print("stopping the local cluster")
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
