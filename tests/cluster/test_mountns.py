"""The harness's mount targets (``localcluster.mountns.Mountpoints``) on a machine shared by two
local clusters (the two test lanes)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from localcluster import mountns
from localcluster.podspec import Mount

pytestmark = pytest.mark.cluster


def test_a_mount_target_another_namespace_uses_outlives_the_cluster_that_made_it(tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "weights").write_text("w")
    target = Path(f"/grpo-mountpoint-probe-{tmp_path.name}") / "model"
    mount = Mount(source=volume, target=str(target), read_only=True)
    first, second = mountns.Mountpoints(), mountns.Mountpoints()
    first.ensure([mount])  # creates the target (and its parent)
    second.ensure([mount])  # finds it there
    pod = subprocess.Popen(
        mountns.wrap(["sh", "-c", "cat weights; echo; read _; cat weights"], [mount],
                     workdir=str(target)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert pod.stdout.readline().strip() == "w"
        first.remove_created()  # the first cluster stops while the second's pod runs
        assert target.is_dir()
        out, _ = pod.communicate("go\n", timeout=30)
        assert out.strip() == "w", "the running pod lost its volume"
    finally:
        pod.kill()
        pod.wait()
    first.remove_created()  # nobody uses it now
    assert not target.parent.exists()
