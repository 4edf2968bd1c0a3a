#!/usr/bin/env bash
# Builds Kueue's controller manager from its Go module at the version pinned in versions.env into
# a cache directory keyed by it, with the CRDs and webhook manifests of the same release. A build
# of its own: Kueue v0.17 is built against controller-runtime 0.23 / client-go 0.35, which can
# share a module neither with Kubernetes 1.36 nor with KubeRay v1.6 (whose webhooks do not compile
# against controller-runtime 0.23). Prints the directory on stdout (progress goes to stderr). A
# second run is a cache hit.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=lib/cache.sh
source "$here/lib/cache.sh"

log() { echo "[kueue] $*" >&2; }

command -v go >/dev/null 2>&1 || { log "Go is not installed: install Go >= 1.26 to build Kueue."; exit 1; }

version="${KUEUE_VERSION:?versions.env must pin KUEUE_VERSION}"
out="$cache_root/kueue/$version"

complete() { [[ -x "$out/bin/kueue" && -d "$out/crds" && -f "$out/webhooks.yaml" && -f "$out/.complete" ]]; }
cache_hit_or_lock kueue

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
log "resolving sigs.k8s.io/kueue $version"
tools_module kueue sigs.k8s.io/kueue "$version" sigs.k8s.io/kueue/cmd/kueue
log "go build: kueue (one-time; ~3 min on 2 cores)"
start=$SECONDS
go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${version}" \
  -o bin/kueue sigs.k8s.io/kueue/cmd/kueue >&2
log "go build took $((SECONDS - start)) s"

src="$(go env GOMODCACHE)/sigs.k8s.io/kueue@${version}"
start_partial
mkdir -p "$out.partial/bin" "$out.partial/crds"
cp bin/kueue "$out.partial/bin/"
cp "$src"/config/components/crd/bases/*.yaml "$out.partial/crds/"
cp "$src/config/components/webhook/manifests.yaml" "$out.partial/webhooks.yaml"
publish
