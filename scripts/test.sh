#!/usr/bin/env bash
# Runs the whole test suite. Installs (once, cached under
# ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}) what the tests need:
#   - real KRM functions from the public catalog, built with Go;
#   - a Python virtualenv with grpcio (a gRPC client not written in Rust);
#   - kpt's end-to-end fixtures, from the kpt Go module;
#   - the kpt CLI itself, built from the same module (about 3 minutes once);
#   - a real kube-apiserver and etcd, built from the Go module proxy
#     (about 12 minutes the first time on 2 cores, then cached).
# Then runs `cargo test`. Extra arguments go to cargo test; without any, kpt's
# newer fn-render fixtures are rendered too when a copy is at hand.
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

# kpt's newer fn-render fixtures are not on the Go module proxy; where a copy
# is available (KRM_FN_KPT_RENDER_FIXTURES, or kpt-fn-render beside
# KRM_FN_CATALOG_FIXTURES), the whole-suite run also renders them.
fixtures="${KRM_FN_KPT_RENDER_FIXTURES:-}"
if [[ -z "$fixtures" && -n "${KRM_FN_CATALOG_FIXTURES:-}" ]]; then
  fixtures="$(dirname "$KRM_FN_CATALOG_FIXTURES")/kpt-fn-render"
fi
if [[ $# -eq 0 && -n "$fixtures" && -d "$fixtures" ]]; then
  KRM_FN_KPT_RENDER_FIXTURES="$fixtures" cargo test --test render_kpt_fixtures -- --ignored
fi
