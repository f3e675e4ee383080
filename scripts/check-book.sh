#!/usr/bin/env bash
#
# check-book.sh — build the book under docs/ with mdBook and check its
# links: every relative link of the built pages, the README, CHANGELOG.md
# and the pages' Markdown must name a file that exists, and every
# `#fragment` an anchor in it (lychee, offline: web links are not fetched).
#
# Usage: scripts/check-book.sh [OUT_DIR]
#   OUT_DIR defaults to docs/book. mdBook and lychee come from
#   KRM_FN_MDBOOK_BIN and KRM_FN_LYCHEE_BIN, else from
#   scripts/build-mdbook.sh and scripts/build-lychee.sh (installed once per
#   machine). A warning from mdBook fails the check too.
#
# .ci/run runs it; tests/hermetic/readme.rs runs it into a scratch directory.

set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-docs/book}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
mdbook="${KRM_FN_MDBOOK_BIN:-$(bash scripts/build-mdbook.sh)}"
lychee="${KRM_FN_LYCHEE_BIN:-$(bash scripts/build-lychee.sh)}"

log="$(mktemp)"
# shellcheck disable=SC2064  # the path is fixed now
trap "rm -f '$log'" EXIT
if ! "$mdbook" build docs --dest-dir "$out" >"$log" 2>&1; then
  cat "$log" >&2
  echo "check-book: mdbook build failed" >&2
  exit 1
fi
if grep -E '(WARN|ERROR)' "$log" >&2; then
  echo "check-book: mdbook build warned (above)" >&2
  exit 1
fi
echo "check-book: book written to $out" >&2

# --root-dir resolves the theme's root-relative links (404.html).
"$lychee" --offline --include-fragments --no-progress --root-dir "$out" \
  "$out/**/*.html" README.md CHANGELOG.md 'docs/src/**/*.md' >&2 \
  || { echo "check-book: broken links (above)" >&2; exit 1; }
echo "check-book: every relative link and anchor resolves" >&2
