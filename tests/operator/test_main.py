"""The kopf handlers feed the work queue with the right run."""

from __future__ import annotations

import kopf

from grpo_operator import main
from grpo_operator.api.constants import LABEL_RUN


class _Queue:
    def __init__(self) -> None:
        self.keys: list[tuple[str, str]] = []

    def enqueue(self, namespace: str, name: str) -> None:
        self.keys.append((namespace, name))


def test_a_ray_cluster_event_wakes_the_run_named_by_its_label():
    queue = _Queue()
    main.on_ray_cluster_event(labels={LABEL_RUN: "my-run", "ray.io/cluster": "other"},
                              namespace="team-a", memo=kopf.Memo(controller=queue))
    assert queue.keys == [("team-a", "my-run")]
