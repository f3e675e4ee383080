#!/usr/bin/env bash
# Builds (once per machine, cached) a real kube-apiserver and etcd from the Go
# module proxy, for the pod runtime's end-to-end tests, and prints the cache
# directory holding `kube-apiserver` and `etcd` (envtest's KUBEBUILDER_ASSETS).
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod redirects every
# staging module to ./staging with replace directives), so a throw-away
# module requires it and pins each staging module to the matching v0.Y.Z
# release. etcd's server module has replace directives too; its requires
# name real releases, so a module with no replaces resolves it.
#
# Usage: scripts/build-test-apiserver.sh [CACHE_DIR]
# Default CACHE_DIR: ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/k8s/<version>
set -euo pipefail

k8s_version=v1.33.13
staging_version=v0.33.13
etcd_version=v3.5.21
dest="${1:-${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/k8s/$k8s_version}"
stamp="$dest/.stamp"
want="kube-apiserver $k8s_version etcd $etcd_version"

if [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" && "$(cat "$stamp" 2>/dev/null)" == "$want" ]]; then
  echo "$dest"
  exit 0
fi
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod CGO_ENABLED=0
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}k8s.io,go.etcd.io"

# The staging modules of Kubernetes 1.32-1.34, all under k8s.io/.
staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller)

echo "build-test-apiserver: building kube-apiserver $k8s_version (10-20 min cold on 2 cores)" >&2
mkdir -p "$work/k8s" && cd "$work/k8s"
{
  echo "module local/k8sbuild"
  echo
  echo "go 1.24.0"
  echo
  echo "godebug default=go1.24"
  echo
  echo "require k8s.io/kubernetes $k8s_version"
  echo
  for m in "${staging[@]}"; do echo "replace k8s.io/$m => k8s.io/$m $staging_version"; done
} > go.mod
go get "k8s.io/kubernetes/cmd/kube-apiserver@$k8s_version" >&2
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=33"
go build -trimpath -tags selinux,notest -ldflags "$ldflags" -o "$dest/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2

echo "build-test-apiserver: building etcd $etcd_version" >&2
mkdir -p "$work/etcd" && cd "$work/etcd"
printf 'module local/etcdbuild\n\ngo 1.24.0\n' > go.mod
go get "go.etcd.io/etcd/server/v3@$etcd_version" >&2
go build -trimpath -ldflags "-s -w" -o "$dest/etcd" go.etcd.io/etcd/server/v3 >&2

echo "$want" > "$stamp"
echo "$dest"
