"""What the bench reads of a process from /proc."""

from __future__ import annotations

import subprocess
import sys
import time

from localcluster.processes import cpu_seconds, tree_rss


def test_cpu_seconds_grow_with_the_work_done_and_memory_counts_the_children():
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.5: pass\n"
                             "input()"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while cpu_seconds(busy.pid) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.5 <= cpu_seconds(busy.pid) < 10
        assert tree_rss(busy.pid) > 1 << 20
    finally:
        busy.communicate(b"\n", timeout=10)
    assert cpu_seconds(busy.pid) == 0.0  # gone
