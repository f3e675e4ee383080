#!/usr/bin/env bash
# Builds (once per machine, cached) a real kube-apiserver and etcd from the Go
# module proxy, for the pod runtime's end-to-end tests, and prints the cache
# directory holding `kube-apiserver` and `etcd` (envtest's KUBEBUILDER_ASSETS).
#
# kube-apiserver comes from the throw-away module of scripts/lib/k8s-module.sh
# (k8s.io/kubernetes cannot be `go install`ed). etcd's server module has
# replace directives too; its requires name real releases, so a module with
# no replaces resolves it.
#
# Usage: scripts/build-test-apiserver.sh [CACHE_DIR]
# Default CACHE_DIR: ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/k8s/<version>
set -euo pipefail

# shellcheck source=scripts/lib/k8s-module.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-module.sh"
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

echo "build-test-apiserver: building kube-apiserver $k8s_version (10-20 min cold on 2 cores)" >&2
k8s_throwaway_module "$work/k8s" && cd "$work/k8s"
go get "k8s.io/kubernetes/cmd/kube-apiserver@$k8s_version" >&2
go build -trimpath -tags selinux,notest -ldflags "$k8s_ldflags" -o "$dest/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2

echo "build-test-apiserver: building etcd $etcd_version" >&2
mkdir -p "$work/etcd" && cd "$work/etcd"
printf 'module local/etcdbuild\n\ngo 1.24.0\n' > go.mod
go get "go.etcd.io/etcd/server/v3@$etcd_version" >&2
go build -trimpath -ldflags "-s -w" -o "$dest/etcd" go.etcd.io/etcd/server/v3 >&2

echo "$want" > "$stamp"
echo "$dest"
