#!/usr/bin/env bash
# Builds, or finds built, everything the tests need from outside this
# repository and the static binaries of the images, once per machine
# (cached under ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}): the Go tools
# one after another, and beside them the static musl build of this
# repository's binaries (scripts/build-images.sh --binaries-only), whose
# long single-threaded link leaves a core to the Go builds; then the real
# node's images, which need both. Prints nothing on stdout; progress on
# stderr. scripts/test.sh runs it first and then asks each script for its
# path (found built: seconds); .ci/run starts it in the background before
# the lints, so that a cold machine builds the tools while it checks.
#
# With KRM_FN_FREE_GO_BUILD_CACHE=1 (.ci/run sets it: a one-off machine),
# Go's build cache (5 to 6 GB after these builds) is emptied at the end: the
# tools stay in KRM_FN_CACHE and the tests build no Go code.
set -euo pipefail
cd "$(dirname "$0")/.."

go_tools() {
  bash scripts/setup-python-client.sh >/dev/null
  bash scripts/fetch-kpt-fixtures.sh >/dev/null
  bash scripts/build-kpt.sh >/dev/null
  bash scripts/build-test-apiserver.sh >/dev/null
  bash scripts/build-kustomize.sh >/dev/null
  bash scripts/build-kubectl.sh >/dev/null
  bash scripts/build-otel-collector.sh >/dev/null
  bash scripts/build-porch.sh >/dev/null
  bash scripts/build-porch-e2e.sh >/dev/null
  bash scripts/build-porch-client.sh >/dev/null
  bash scripts/build-semver-peer.sh >/dev/null
  bash scripts/build-node.sh >/dev/null
}

start=$SECONDS
# The catalog first: the images and the Go tools' tests both use it.
bash scripts/install-catalog-functions.sh >&2
# Each in a background job, where `set -e` stops it at its first failure.
bash scripts/build-images.sh --binaries-only >&2 &
binaries=$!
go_tools &
go=$!
go_status=0
wait "$go" || go_status=$?
binaries_status=0
wait "$binaries" || binaries_status=$?
if ((go_status != 0)); then
  echo "build-tools: a Go tool failed to build (exit $go_status); its output is above" >&2
  exit "$go_status"
fi
if ((binaries_status != 0)); then
  echo "build-tools: the static binaries failed to build (exit $binaries_status); cargo's output is above" >&2
  exit "$binaries_status"
fi
bash scripts/build-node-images.sh >/dev/null
if [[ "${KRM_FN_FREE_GO_BUILD_CACHE:-}" == 1 ]]; then
  go clean -cache
fi
echo "build-tools: ready after $((SECONDS - start))s" >&2
