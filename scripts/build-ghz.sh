#!/usr/bin/env bash
#
# build-ghz.sh — build ghz, the gRPC load generator, from the Go module
# proxy, once per machine, and print the path of the binary on stdout
# (progress on stderr).
#
# Usage: scripts/build-ghz.sh
#   The binary lands in ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/ghz/<version>/ghz.
#
# The throughput benchmark (benches/throughput.rs) drives this runner and
# Porch's Go function runner with the same ghz, found through the
# KRM_FN_GHZ_BIN environment variable (or by running this script).
#
# Needs only Go. Idempotent (scripts/lib/go-tool.sh).

set -euo pipefail

MODULE=github.com/bojand/ghz
VERSION=v0.120.0

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-ghz format 1"

# shellcheck source=scripts/lib/go-tool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-tool.sh"
GO_TOOL_CHECK=--version GO_TOOL_PACKAGE="$MODULE/cmd/ghz" build_go_tool ghz "$MODULE" "$VERSION" "$STAMP_FORMAT" -trimpath -ldflags "-s -w"
