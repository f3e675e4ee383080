#!/usr/bin/env bash
# Builds (once per machine, cached) kubectl from the Go module proxy, the
# same Kubernetes release as the test API server, and prints its path.
#
# The deployment tests (tests/beds/deploy.rs) run the book's deployment commands with it:
# `kubectl apply --server-side` of the CRDs and namespaces, then of each
# `kustomize build deploy/...` output with `--dry-run=server`. They find it
# through KRM_FN_KUBECTL_BIN (scripts/test.sh sets it).
#
# Usage: scripts/build-kubectl.sh
# Binary: ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/kubectl/<version>/kubectl
set -euo pipefail

# shellcheck source=scripts/lib/k8s-module.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-module.sh"
dest="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/kubectl/$k8s_version"
stamp="$dest/.stamp"
want="kubectl $k8s_version format 1"

if [[ -x "$dest/kubectl" && "$(cat "$stamp" 2>/dev/null)" == "$want" ]]; then
  echo "$dest/kubectl"
  exit 0
fi
mkdir -p "$dest"
rm -f "$stamp"   # a partial build must never look complete
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod CGO_ENABLED=0
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}k8s.io"

start=$SECONDS
echo "build-kubectl: building kubectl $k8s_version" >&2
k8s_throwaway_module "$work/k8s" && cd "$work/k8s"
go get "k8s.io/kubernetes/cmd/kubectl@$k8s_version" >&2
go build -trimpath -ldflags "$k8s_ldflags" -o "$dest/kubectl" k8s.io/kubernetes/cmd/kubectl >&2
"$dest/kubectl" version --client >/dev/null || { echo "build-kubectl: the built kubectl does not run" >&2; exit 1; }

echo "$want" > "$stamp"
echo "build-kubectl: kubectl $k8s_version ready in $((SECONDS - start))s" >&2
echo "$dest/kubectl"
