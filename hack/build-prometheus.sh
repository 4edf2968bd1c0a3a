#!/usr/bin/env bash
# Builds prometheus and promtool from the Go module at the version pinned in versions.env into a
# cache directory keyed by it. Not Debian's package: its 2.42 build leaves out Kubernetes service
# discovery ("field kubernetes_sd_configs not found"), which the tests need to scrape driver pods
# the way a PodMonitor does. Prints the directory (binaries in its bin/) on stdout (progress goes
# to stderr). A second run is a cache hit.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

log() { echo "[prometheus] $*" >&2; }

command -v go >/dev/null 2>&1 || { log "Go is not installed: install Go >= 1.26 to build Prometheus."; exit 1; }

module="${PROMETHEUS_MODULE_VERSION:?versions.env must pin PROMETHEUS_MODULE_VERSION}"
cache_root="${GRPO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/grpo-operator}"
out="$cache_root/prometheus/$module"

complete() { [[ -x "$out/bin/prometheus" && -x "$out/bin/promtool" && -f "$out/.complete" ]]; }
if complete; then echo "$out"; exit 0; fi

# Concurrent callers wait for one build instead of racing it.
mkdir -p "$cache_root"
exec 9>"$cache_root/.prometheus.lock"
flock 9
if complete; then echo "$out"; exit 0; fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
printf 'module grpo.dev/prometheus\n\ngo %s\n\nrequire github.com/prometheus/prometheus %s\n' \
  "$(go env GOVERSION | sed 's/^go\([0-9]*\.[0-9]*\).*/\1/')" "$module" > go.mod
printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "github.com/prometheus/prometheus/cmd/prometheus"\n\t_ "github.com/prometheus/prometheus/cmd/promtool"\n)\n' > tools.go
log "resolving github.com/prometheus/prometheus $module (Prometheus ${PROMETHEUS_VERSION})"
GOFLAGS=-tags=tools go mod tidy >&2
log "go build: prometheus, promtool (one-time; ~4 min on 2 cores)"
start=$SECONDS
ldflags="-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION}"
go build -trimpath -ldflags "$ldflags" -o bin/ \
  github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool >&2
log "go build took $((SECONDS - start)) s"

[[ -d "$out.partial" ]] && rm -rf "$out.partial"
mkdir -p "$out.partial/bin"
cp bin/prometheus bin/promtool "$out.partial/bin/"
"$out.partial/bin/prometheus" --version >&2
touch "$out.partial/.complete"
[[ -d "$out" ]] && rm -rf "$out"
mv "$out.partial" "$out"
log "done: $out/bin"
echo "$out"
