#!/usr/bin/env bash
# The render-only library (`--no-default-features --features render`: no
# Kubernetes, gRPC, OCI or command-line crates) builds and passes its unit
# tests and the crate-root API test on its own.
# `--cfg krm_fn_render_only` leaves the test beds out (as a dependency they
# would turn the `full` feature on) and builds only the `api` module of the
# hermetic tests; `-D warnings` makes a warning of this build an error, as
# clippy does for the full one. Its own target directory: other RUSTFLAGS
# would otherwise make the next build recompile everything.
# Extra arguments go to cargo test (`--no-run`: build only; .ci/run builds
# it while the tools are still building, scripts/test.sh runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg krm_fn_render_only -D warnings" \
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/render-only" \
  cargo test --no-default-features --features render --lib --test hermetic "$@"
