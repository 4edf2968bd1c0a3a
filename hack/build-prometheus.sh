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
# shellcheck source=lib/cache.sh
source "$here/lib/cache.sh"

log() { echo "[prometheus] $*" >&2; }

command -v go >/dev/null 2>&1 || { log "Go is not installed: install Go >= 1.26 to build Prometheus."; exit 1; }

module="${PROMETHEUS_MODULE_VERSION:?versions.env must pin PROMETHEUS_MODULE_VERSION}"
out="$cache_root/prometheus/$module"

complete() { [[ -x "$out/bin/prometheus" && -x "$out/bin/promtool" && -f "$out/.complete" ]]; }
cache_hit_or_lock prometheus

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
log "resolving github.com/prometheus/prometheus $module (Prometheus ${PROMETHEUS_VERSION})"
tools_module prometheus github.com/prometheus/prometheus "$module" \
  github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
log "go build: prometheus, promtool (one-time; ~4 min on 2 cores)"
start=$SECONDS
ldflags="-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION}"
go build -trimpath -ldflags "$ldflags" -o bin/ \
  github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool >&2
log "go build took $((SECONDS - start)) s"

start_partial
mkdir -p "$out.partial/bin"
cp bin/prometheus bin/promtool "$out.partial/bin/"
"$out.partial/bin/prometheus" --version >&2
publish
