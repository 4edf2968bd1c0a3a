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

log() { echo "[kueue] $*" >&2; }

command -v go >/dev/null 2>&1 || { log "Go is not installed: install Go >= 1.26 to build Kueue."; exit 1; }

version="${KUEUE_VERSION:?versions.env must pin KUEUE_VERSION}"
cache_root="${GRPO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/grpo-operator}"
out="$cache_root/kueue/$version"

complete() { [[ -x "$out/bin/kueue" && -d "$out/crds" && -f "$out/webhooks.yaml" && -f "$out/.complete" ]]; }
if complete; then echo "$out"; exit 0; fi

# Concurrent callers wait for one build instead of racing it.
mkdir -p "$cache_root"
exec 9>"$cache_root/.kueue.lock"
flock 9
if complete; then echo "$out"; exit 0; fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
printf 'module grpo.dev/kueue\n\ngo %s\n\nrequire sigs.k8s.io/kueue %s\n' \
  "$(go env GOVERSION | sed 's/^go\([0-9]*\.[0-9]*\).*/\1/')" "$version" > go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kueue/cmd/kueue"\n' > tools.go
log "resolving sigs.k8s.io/kueue $version"
GOFLAGS=-tags=tools go mod tidy >&2
log "go build: kueue (one-time; ~3 min on 2 cores)"
start=$SECONDS
go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${version}" \
  -o bin/kueue sigs.k8s.io/kueue/cmd/kueue >&2
log "go build took $((SECONDS - start)) s"

src="$(go env GOMODCACHE)/sigs.k8s.io/kueue@${version}"
[[ -d "$out.partial" ]] && chmod -R u+w "$out.partial" && rm -rf "$out.partial"
mkdir -p "$out.partial/bin" "$out.partial/crds"
cp bin/kueue "$out.partial/bin/"
cp "$src"/config/components/crd/bases/*.yaml "$out.partial/crds/"
cp "$src/config/components/webhook/manifests.yaml" "$out.partial/webhooks.yaml"
chmod -R u+w "$out.partial"
touch "$out.partial/.complete"
[[ -d "$out" ]] && chmod -R u+w "$out" && rm -rf "$out"
mv "$out.partial" "$out"
log "done: $out/bin"
echo "$out"
