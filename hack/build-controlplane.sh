#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, the KubeRay
# operator, helm and kstatus (hack/kstatus: cli-utils' status library as a command) from Go
# modules into a cache directory keyed by the pins. Two `go build`s: everything on the
# Kubernetes 1.36 libraries in one module, and KubeRay in a module of its own,
# because the proxy refuses KubeRay v1.7.0's source (403) and v1.6.1 is built against
# controller-runtime 0.22 / client-go 0.35, which cannot share a module with 0.36.
# Prints the binary directory on stdout (progress goes to stderr). A second run is a cache hit.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=lib/cache.sh
source "$here/lib/cache.sh"

log() { echo "[controlplane] $*" >&2; }

command -v go >/dev/null 2>&1 || { log "Go is not installed: install Go >= 1.26 to build the control plane."; exit 1; }

kstatus_src="$(sha256sum "$here/kstatus/main.go" | cut -c1-8)"
key="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_kuberay-${KUBERAY_VERSION}_helm-${HELM_VERSION}_cli-utils-${CLI_UTILS_VERSION}-${kstatus_src}"
out="$cache_root/controlplane/$key"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kuberay-operator helm kstatus)

complete() {
  for b in "${binaries[@]}"; do [[ -x "$out/bin/$b" ]] || return 1; done
  [[ -d "$out/kuberay-crds" && -f "$out/kwok-stages/pod-ready.yaml" && -f "$out/.complete" ]]
}
cache_hit_or_lock controlplane

log "building into $out (one-time; ~20-40 min on 2 cores)"
proxy="$(go env GOPROXY)"
if ! go list -m "k8s.io/kubernetes@${KUBERNETES_VERSION}" >/dev/null 2>&1; then
  log "The Go module proxy ($proxy) is unreachable or lacks k8s.io/kubernetes@${KUBERNETES_VERSION}: cannot build the control plane."
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

# k8s.io/kubernetes replaces every staging module with a relative path and requires it at v0.0.0;
# a module of our own must replace each with its published v0.N.P.
staging_version="v0${KUBERNETES_VERSION#v1}"
kube_mod="$(go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
mapfile -t staging < <(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$kube_mod")
log "k8s ${KUBERNETES_VERSION}: ${#staging[@]} staging modules pinned to ${staging_version}"

{
  echo "module grpo.dev/controlplane"
  echo
  echo "go $(go env GOVERSION | sed 's/^go\([0-9]*\.[0-9]*\).*/\1/')"
  echo
  echo "require ("
  echo "  k8s.io/kubernetes ${KUBERNETES_VERSION}"
  echo "  go.etcd.io/etcd/server/v3 ${ETCD_VERSION}"
  echo "  sigs.k8s.io/kwok ${KWOK_VERSION}"
  echo "  helm.sh/helm/v3 ${HELM_VERSION}"
  echo "  sigs.k8s.io/cli-utils ${CLI_UTILS_VERSION}"
  echo ")"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "  $m => $m ${staging_version}"; done
  echo ")"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
GO
mkdir -p cmd/kstatus && cp "$here/kstatus/main.go" cmd/kstatus/
log "resolving modules (go mod tidy)"
GOFLAGS=-tags=tools go mod tidy >&2

build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
kv="${KUBERNETES_VERSION#v}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=${KUBERNETES_VERSION} -X $pkg.gitMajor=${kv%%.*}"
  ldflags+=" -X $pkg.gitMinor=$(echo "$kv" | cut -d. -f2) -X $pkg.gitTreeState=clean -X $pkg.buildDate=${build_date}"
done
# helm assumes Kubernetes 1.20 for .Capabilities unless told the real version.
ldflags+=" -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=${kv%%.*}"
ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(echo "$kv" | cut -d. -f2)"

mkdir -p bin
log "go build 1/2: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, helm, kstatus"
start=$SECONDS
go build -trimpath -ldflags "$ldflags" -o bin/ \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl \
  go.etcd.io/etcd/server/v3 \
  sigs.k8s.io/kwok/cmd/kwok \
  helm.sh/helm/v3/cmd/helm \
  ./cmd/kstatus >&2
mv bin/server bin/etcd  # go names a /vN module's binary after the element before /vN
log "go build 1/2 took $((SECONDS - start)) s"

mkdir kuberay && (
  cd kuberay
  printf 'module grpo.dev/kuberay\n\ngo 1.25\n\nrequire github.com/ray-project/kuberay/ray-operator %s\n' "${KUBERAY_VERSION}" > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/ray-project/kuberay/ray-operator"\n' > tools.go
  GOFLAGS=-tags=tools go mod tidy >&2
  log "go build 2/2: kuberay-operator ${KUBERAY_VERSION}"
  start=$SECONDS
  go build -trimpath -ldflags "-s -w" -o ../bin/kuberay-operator github.com/ray-project/kuberay/ray-operator >&2
  log "go build 2/2 took $((SECONDS - start)) s"
)

modcache="$(go env GOMODCACHE)"
kuberay_src="$modcache/github.com/ray-project/kuberay/ray-operator@${KUBERAY_VERSION}"
kwok_src="$modcache/sigs.k8s.io/kwok@${KWOK_VERSION}"

start_partial
mkdir -p "$out.partial/bin"
cp bin/* "$out.partial/bin/"
mkdir -p "$out.partial/kuberay-crds" "$out.partial/kwok-stages"
cp "$kuberay_src"/config/crd/bases/*.yaml "$out.partial/kuberay-crds/"
for stage in node/fast/node-initialize pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
  cp "$kwok_src/kustomize/stage/$stage.yaml" "$out.partial/kwok-stages/"
done
cp "$here/versions.env" "$out.partial/versions.env"
publish
