#!/usr/bin/env bash
# Downloads the kpt module from the Go module proxy (once; Go caches it) and
# prints its directory. Its e2e/testdata/fn-eval cases are conformance
# fixtures for function evaluation (see tests/hermetic/fixtures.rs).
#
# github.com/GoogleContainerTools/kpt v1.0.0-beta.54 is the newest kpt release
# the module proxy serves here.
set -euo pipefail
module=github.com/GoogleContainerTools/kpt
version=v1.0.0-beta.54
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/GoogleContainerTools"
dir=$(GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z "$dir" || ! -d "$dir/e2e/testdata" ]]; then
  echo "fetch-kpt-fixtures: error: could not download $module@$version from the Go module proxy" >&2
  exit 1
fi
echo "$dir"
