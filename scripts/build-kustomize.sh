#!/usr/bin/env bash
#
# build-kustomize.sh — build the kustomize CLI from the Go module proxy, once
# per machine, and print the path of the binary on stdout (progress on stderr).
#
# Usage: scripts/build-kustomize.sh
#   The binary lands in ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/kustomize/<version>/kustomize.
#
# deploy/ is a set of kustomizations (Porch's manifests with this project's
# images, RBAC and hardening); the deployment tests (tests/beds/deploy.rs) build
# them with this binary, which they find through KRM_FN_KUSTOMIZE_BIN
# (scripts/test.sh sets it).
#
# Needs only Go. Idempotent (scripts/lib/go-tool.sh): a stamp file records
# module, version and format; when it matches and the binary is present the
# script prints the path at once without calling go.

set -euo pipefail

# v5.8.2: the newest, v5.8.3, needs a k8s.io/kube-openapi version the
# module proxy refuses (403 "not available").
MODULE=sigs.k8s.io/kustomize/kustomize/v5
VERSION=v5.8.2

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-kustomize format 1"

export CGO_ENABLED=0
# shellcheck source=scripts/lib/go-tool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-tool.sh"
build_go_tool kustomize "$MODULE" "$VERSION" "$STAMP_FORMAT" -trimpath -ldflags "-s -w"
