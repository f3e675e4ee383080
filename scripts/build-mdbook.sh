#!/usr/bin/env bash
#
# build-mdbook.sh — install mdBook, which builds the book under docs/, from
# crates.io once per machine, and print the path of the binary on stdout
# (progress on stderr).
#
# Usage: scripts/build-mdbook.sh
#   The binary lands in
#   ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/mdbook/<version>/bin/mdbook.
#   Then: "$(bash scripts/build-mdbook.sh)" build docs
#
# Only the HTML book and its search index are built in (no `serve` or
# `watch`: fewer crates to compile). Needs cargo. Idempotent
# (scripts/lib/cargo-tool.sh).

set -euo pipefail

VERSION=0.5.4

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-mdbook format 1"

# shellcheck source=scripts/lib/cargo-tool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cargo-tool.sh"
build_cargo_tool mdbook mdbook "$VERSION" "$STAMP_FORMAT" --no-default-features --features search
