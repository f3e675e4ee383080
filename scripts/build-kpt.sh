#!/usr/bin/env bash
#
# build-kpt.sh — build the real kpt CLI from the Go module proxy, once per
# machine, and print the path of the binary on stdout (progress on stderr).
#
# Usage: scripts/build-kpt.sh
#   The binary lands in ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/kpt/<version>/kpt.
#
# The render conformance tests (tests/hermetic/render_vs_kpt.rs) and the render
# benchmark (benches/render.rs) run `kpt fn render` from this binary; they find
# it through the KRM_FN_KPT_BIN environment variable that scripts/test.sh sets.
#
# github.com/GoogleContainerTools/kpt v1.0.0-beta.54 is the newest kpt release
# the module proxy serves here (same pin as scripts/fetch-kpt-fixtures.sh).
#
# Needs only Go. Idempotent (scripts/lib/go-tool.sh): a stamp file records
# module, version and format; when it matches and the binary is present the
# script prints the path at once without calling go.

set -euo pipefail

MODULE=github.com/GoogleContainerTools/kpt
VERSION=v1.0.0-beta.54

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-kpt format 1"

# shellcheck source=scripts/lib/go-tool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-tool.sh"
build_go_tool kpt "$MODULE" "$VERSION" "$STAMP_FORMAT" \
  -ldflags "-X github.com/GoogleContainerTools/kpt/run.version=${VERSION#v}"
