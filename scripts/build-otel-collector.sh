#!/usr/bin/env bash
#
# build-otel-collector.sh — build a real OpenTelemetry Collector from the Go
# module proxy, once per machine, and print the path of the binary on stdout
# (progress on stderr).
#
# Usage: scripts/build-otel-collector.sh
#   The binary lands in
#   ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/otelcol/<version>/otelcol.
#
# The distribution is assembled by the collector project's own builder
# (go.opentelemetry.io/collector/cmd/builder, "ocb") from a manifest naming
# the collector's OTLP receiver (gRPC and HTTP) and the file exporter (OTLP
# JSON lines) plus the debug exporter. The telemetry tests
# (tests/beds/telemetry.rs) send the runner's spans to it; they find it through
# the KRM_FN_OTELCOL_BIN environment variable that scripts/test.sh sets.
#
# Needs only Go. Idempotent: a stamp file records the versions and recipe;
# when it matches and the binary is present the script prints the path at
# once without calling go.

set -euo pipefail

# Core modules come in two series (v0.x and the stable v1.(x-94)); the
# contrib file exporter follows core. v0.162.0 is the newest whose whole
# build graph the Go module proxy serves here.
CORE_VERSION=v0.162.0
STABLE_VERSION=v1.68.0
CONTRIB_VERSION=v0.162.0

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-otel-collector format 1"

DEST="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/otelcol/$CORE_VERSION"
BIN="$DEST/otelcol"
STAMP="$DEST/.stamp"
stamp_content="$STAMP_FORMAT core@$CORE_VERSION stable@$STABLE_VERSION contrib@$CONTRIB_VERSION"

die() { echo "build-otel-collector: error: $*" >&2; exit 1; }

if [[ -x "$BIN" && -f "$STAMP" && "$(<"$STAMP")" == "$stamp_content" ]]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$DEST"
rm -f "$STAMP"   # a partial build must never look complete

# shellcheck source=scripts/lib/go-proxy.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-proxy.sh"

start=$SECONDS
BUILDER=go.opentelemetry.io/collector/cmd/builder
echo "build-otel-collector: building the collector builder $CORE_VERSION" >&2
go_download "$BUILDER" "$CORE_VERSION" >/dev/null
go_install_cached "$workdir/bin" "$BUILDER" "$CORE_VERSION"
[[ -x "$workdir/bin/builder" ]] || die "go install $BUILDER@$CORE_VERSION did not produce a builder binary"

cat >"$workdir/manifest.yaml" <<EOF
dist:
  name: otelcol
  description: OpenTelemetry Collector with the OTLP receiver and the file and debug exporters
  output_path: $workdir/dist
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver $CORE_VERSION
exporters:
  - gomod: go.opentelemetry.io/collector/exporter/debugexporter $CORE_VERSION
  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter $CONTRIB_VERSION
EOF

echo "build-otel-collector: building the collector (a few minutes the first time)" >&2
# The builder writes the distribution's sources; the module is resolved here
# with `go get` and `go mod tidy -e`, because the builder's plain `go mod
# tidy` fails on a module version the proxy does not serve that only the
# file exporter's own tests import.
if ! "$workdir/bin/builder" --config "$workdir/manifest.yaml" \
    --skip-get-modules --skip-compilation >"$workdir/build.log" 2>&1; then
  cat "$workdir/build.log" >&2
  die "the collector builder failed"
fi
(
  cd "$workdir/dist"
  go mod init krm-fn-runner.test/otelcol >>"$workdir/build.log" 2>&1 &&
    # Every module the generated sources import, at the builder's versions
    # (left to `go mod tidy` they would resolve to the newest, unserved ones).
    go get \
      go.opentelemetry.io/collector/receiver/otlpreceiver@"$CORE_VERSION" \
      go.opentelemetry.io/collector/exporter/debugexporter@"$CORE_VERSION" \
      github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter@"$CONTRIB_VERSION" \
      go.opentelemetry.io/collector/otelcol@"$CORE_VERSION" \
      go.opentelemetry.io/collector/service@"$CORE_VERSION" \
      go.opentelemetry.io/collector/connector@"$CORE_VERSION" \
      go.opentelemetry.io/collector/component@"$STABLE_VERSION" \
      go.opentelemetry.io/collector/confmap@"$STABLE_VERSION" \
      go.opentelemetry.io/collector/exporter@"$STABLE_VERSION" \
      go.opentelemetry.io/collector/extension@"$STABLE_VERSION" \
      go.opentelemetry.io/collector/processor@"$STABLE_VERSION" \
      go.opentelemetry.io/collector/receiver@"$STABLE_VERSION" \
      go.opentelemetry.io/collector/confmap/provider/envprovider@"$STABLE_VERSION" \
      go.opentelemetry.io/collector/confmap/provider/fileprovider@"$STABLE_VERSION" \
      go.opentelemetry.io/collector/confmap/provider/httpprovider@"$STABLE_VERSION" \
      go.opentelemetry.io/collector/confmap/provider/httpsprovider@"$STABLE_VERSION" \
      go.opentelemetry.io/collector/confmap/provider/yamlprovider@"$STABLE_VERSION" \
      >>"$workdir/build.log" 2>&1 &&
    go mod tidy -e >>"$workdir/build.log" 2>&1 &&
    go build -trimpath -ldflags "-s -w" -o otelcol . >>"$workdir/build.log" 2>&1
) || { cat "$workdir/build.log" >&2; die "building the collector failed"; }
[[ -x "$workdir/dist/otelcol" ]] || die "the collector build produced no otelcol binary"
"$workdir/dist/otelcol" components >/dev/null 2>&1 || die "the built collector does not run"

mv -f "$workdir/dist/otelcol" "$BIN"
printf '%s\n' "$stamp_content" >"$STAMP"
echo "build-otel-collector: collector $CORE_VERSION ready in $((SECONDS - start))s" >&2
echo "$BIN"
