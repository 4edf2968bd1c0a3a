#!/usr/bin/env bash
# `make test`: pytest in two lanes side by side on this machine's two cores, each pytest starting
# its expensive things once. Lane one: the tests marked `cluster` (the local control plane and
# every run on it). Lane two: the rest (the trainer tests' local Ray and vLLM engine, the quick
# tests), then the cluster tests also marked `second_cluster` on a control plane of their own —
# the rest take about half as long as the cluster tests, so lane two fills what was idle. Lines are
# prefixed [cluster] / [rest] / [cluster2]; each pytest prints its own summary, and the exit
# status is the first failure's; the lanes' FAILED/ERROR lines are repeated last, so the end of the
# output (all a CI page may keep) names what failed. PYTEST_WORKERS=1 runs one pytest instead.
# Arguments go to all.
set -uo pipefail

python="${PYTHON:?}"
if [[ "${PYTEST_WORKERS:-2}" == 1 ]]; then
  exec "$python" -m pytest "$@"
fi

summaries="$(mktemp -d)"
trap 'rm -rf "$summaries"' EXIT

run() {  # run NAME MARKEXPR ARGS...: pytest on the tests MARKEXPR selects, its lines prefixed
  local name="$1" marks="$2"
  shift 2
  "$python" -m pytest -m "$marks" "$@" 2>&1 | sed -u "s/^/[$name] /" | tee "$summaries/$name"
  local status="${PIPESTATUS[0]}"
  # 5: nothing selected (the arguments named only tests of the other side).
  [[ "$status" == 5 ]] && status=0
  return "$status"
}

run cluster "cluster and not second_cluster" "$@" &
cluster=$!
lane_two() {
  run rest "not cluster" "$@"
  local rest_status=$?
  run cluster2 "second_cluster" "$@"
  local cluster2_status=$?
  echo "make test: the rest exit $rest_status, second cluster tests exit $cluster2_status"
  (( rest_status != 0 )) && return "$rest_status"
  return "$cluster2_status"
}
lane_two "$@" &
two=$!
trap 'kill "$cluster" "$two" 2>/dev/null' INT TERM
wait "$cluster"; cluster_status=$?
wait "$two"; two_status=$?
echo "make test: cluster tests exit $cluster_status, lane two exit $two_status"
grep -hE '^\[[a-z0-9]+\] (FAILED|ERROR) ' "$summaries"/* 2>/dev/null
(( cluster_status != 0 )) && exit "$cluster_status"
exit "$two_status"
