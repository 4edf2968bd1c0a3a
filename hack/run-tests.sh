#!/usr/bin/env bash
# `make test`: pytest as two processes side by side on this machine's two cores, each starting
# its expensive things once: the tests marked `cluster` (the local control plane and every run
# on it), and the rest (the trainer tests' local Ray and vLLM engine, the quick tests). Their
# lines are prefixed [cluster] / [rest]; each prints its own summary, and the exit status is the
# first failure's. PYTEST_WORKERS=1 runs one pytest instead. Arguments go to both.
set -uo pipefail

python="${PYTHON:?}"
if [[ "${PYTEST_WORKERS:-2}" == 1 ]]; then
  exec "$python" -m pytest "$@"
fi

run() {  # run NAME MARKEXPR ARGS...: pytest on the tests MARKEXPR selects, its lines prefixed
  local name="$1" marks="$2"
  shift 2
  "$python" -m pytest -m "$marks" "$@" 2>&1 | sed -u "s/^/[$name] /"
  local status="${PIPESTATUS[0]}"
  # 5: nothing selected (the arguments named only tests of the other side).
  [[ "$status" == 5 ]] && status=0
  return "$status"
}

run cluster "cluster" "$@" &
cluster=$!
run rest "not cluster" "$@" &
rest=$!
trap 'kill "$cluster" "$rest" 2>/dev/null' INT TERM
wait "$cluster"; cluster_status=$?
wait "$rest"; rest_status=$?
echo "make test: cluster tests exit $cluster_status, the rest exit $rest_status"
(( cluster_status != 0 )) && exit "$cluster_status"
exit "$rest_status"
