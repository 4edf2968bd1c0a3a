"""The API server's audit log, for counting requests by client identity (``make bench``).

One event per request at the Metadata level: who, what, when — no bodies. The stage of a
request's arrival is left out, so a short request leaves one event and a watch two (response
started, response complete) under the same ``auditID``; counting IDs counts requests.
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"""


LOG_NAME = "audit.log"


def apiserver_flags(directory: Path) -> list[str]:
    """kube-apiserver flags that write the audit log to ``directory/audit.log``."""
    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "audit-policy.yaml"
    policy.write_text(POLICY)
    # One file for the cluster's life: the default rotates at 100 MB, which a bench can reach.
    return [f"--audit-policy-file={policy}", f"--audit-log-path={directory / LOG_NAME}",
            "--audit-log-format=json", "--audit-log-maxsize=100000"]


def _timestamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


READS = frozenset({"get", "list"})  # a watch is a stream per process, not a read per run


def requests_by_user(lines: Iterable[str], since: float, until: float,
                     verbs: frozenset[str] | None = None) -> Counter[str]:
    """Requests received in [since, until] (Unix seconds), by authenticated user name; only
    those of ``verbs`` when given."""
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    for line in lines:
        if not line.strip():
            continue
        event = json.loads(line)
        if event["auditID"] in seen:
            continue
        seen.add(event["auditID"])
        if verbs is not None and event.get("verb") not in verbs:
            continue
        if since <= _timestamp(event["requestReceivedTimestamp"]) <= until:
            counts[event["user"]["username"]] += 1
    return counts


def read_requests_by_user(path: Path, since: float, until: float,
                          verbs: frozenset[str] | None = None) -> Counter[str]:
    with path.open(errors="replace") as lines:
        return requests_by_user(lines, since, until, verbs)
