#!/usr/bin/env bash
# Runs the whole test suite. Installs (once, cached under
# ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}) what the tests need:
#   - real KRM functions from the public catalog, built with Go;
#   - a Python virtualenv with grpcio (a gRPC client not written in Rust);
#   - kpt's end-to-end fixtures, from the kpt Go module;
#   - the kpt CLI itself, built from the same module (about 3 minutes once);
#   - a real kube-apiserver and etcd, built from the Go module proxy
#     (about 12 minutes the first time on 2 cores, then cached).
# Then runs `cargo test`. Extra arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-catalog-functions.sh >&2
KRM_FN_PYTHON="$(bash scripts/setup-python-client.sh)"
export KRM_FN_PYTHON
KRM_FN_KPT_MODULE="$(bash scripts/fetch-kpt-fixtures.sh)"
export KRM_FN_KPT_MODULE
KRM_FN_KPT_BIN="$(bash scripts/build-kpt.sh)"
export KRM_FN_KPT_BIN
KUBEBUILDER_ASSETS="$(bash scripts/build-test-apiserver.sh)"
export KUBEBUILDER_ASSETS

cargo test "$@"
