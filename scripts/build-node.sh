#!/usr/bin/env bash
# Builds (once per machine, cached) what the real-node test bed
# (testbed/src/node_support.rs) runs besides kube-apiserver and etcd
# (scripts/build-test-apiserver.sh): kubelet, kube-proxy, kube-scheduler and
# kube-controller-manager of the same Kubernetes release, CoreDNS (cluster
# DNS, kubernetes plugin), and the node's pause image binary; prints the
# cache directory holding them.
#
# The Kubernetes commands come from the throw-away module of
# scripts/lib/k8s-module.sh (k8s.io/kubernetes cannot be `go install`ed),
# static (CGO_ENABLED=0). CoreDNS's module has no replace directives and is
# built as it is. The pause binary is Kubernetes' own build/pause/linux/pause.c,
# read from the k8s.io/kubernetes module just downloaded, compiled static
# with gcc (the sandbox image of every pod).
#
# containerd, runc and the CNI plugins come from Debian's packages
# (.ci/run installs them); this script only checks they are there.
#
# About 7 minutes cold on 2 cores (most of it kubelet and
# kube-controller-manager), then instant.
#
# Usage: scripts/build-node.sh [CACHE_DIR]
# Default CACHE_DIR: ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/node/<version>
set -euo pipefail

# shellcheck source=scripts/lib/k8s-module.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-module.sh"
coredns_version=v1.12.4
dest="${1:-${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/node/$k8s_version}"
stamp="$dest/.stamp"
want="node $k8s_version coredns $coredns_version format 1"
commands=(kubelet kube-proxy kube-scheduler kube-controller-manager)

for tool in containerd runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback iptables gcc; do
  command -v "$tool" >/dev/null || {
    echo "build-node: $tool is missing (apt-get install containerd runc containernetworking-plugins iptables gcc)" >&2
    exit 1
  }
done

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$dest"
  exit 0
fi
mkdir -p "$dest"
rm -f "$stamp"   # a partial build must never look complete
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod CGO_ENABLED=0
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}k8s.io,go.etcd.io,github.com/coredns"
start=$SECONDS

echo "build-node: building ${commands[*]} $k8s_version (about 7 min cold on 2 cores)" >&2
k8s_throwaway_module "$work/k8s" && cd "$work/k8s"
for c in "${commands[@]}"; do
  go get "k8s.io/kubernetes/cmd/$c@$k8s_version" >&2
done
for c in "${commands[@]}"; do
  go build -trimpath -tags selinux,notest -ldflags "$k8s_ldflags" -o "$dest/$c" "k8s.io/kubernetes/cmd/$c" >&2
done

echo "build-node: building the pause binary" >&2
pause_c="$(go env GOMODCACHE)/k8s.io/kubernetes@$k8s_version/build/pause/linux/pause.c"
[[ -f "$pause_c" ]] || { echo "build-node: $pause_c not found in the module cache" >&2; exit 1; }
gcc -Os -static -DVERSION="$k8s_version-krm" -o "$dest/pause" "$pause_c"

echo "build-node: building CoreDNS $coredns_version" >&2
mkdir -p "$work/coredns" && cd "$work/coredns"
printf 'module local/corednsbuild\n\ngo 1.24.0\n' > go.mod
go get "github.com/coredns/coredns@$coredns_version" >&2
go build -trimpath -ldflags "-s -w" -o "$dest/coredns" github.com/coredns/coredns >&2
"$dest/coredns" -version >/dev/null || { echo "build-node: the built coredns does not run" >&2; exit 1; }

echo "$want" > "$stamp"
echo "build-node: ready in $((SECONDS - start))s" >&2
echo "$dest"
