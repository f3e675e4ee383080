#!/usr/bin/env bash
# The main job on real input: builds krm-fn-runner and the catalog functions,
# starts `krm-fn-runner serve` on a Unix socket, evaluates a real package
# (examples/resourcelists/hello-namespace.yaml) with the catalog's
# set-namespace through it over gRPC, prints the result, and stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --quiet
catalog="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/catalog"
bash scripts/install-catalog-functions.sh "$catalog" >&2
bin=target/release/krm-fn-runner
version=$(awk '$1 == "set-namespace" {print $2}' "$catalog/versions.txt")
image="ghcr.io/kptdev/krm-functions-catalog/set-namespace:$version"

work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin" serve --listen "unix:$work/runner.sock" --config "$catalog/config.yaml" \
  --functions "$catalog/bin" --disable-runtimes=pod 2> "$work/server.log" &
server=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/server.log" && break
  sleep 0.1
done
grep "listening on" "$work/server.log" >&2 || { cat "$work/server.log" >&2; exit 1; }

echo "== evaluating $image through krm-fn-runner (gRPC over unix:$work/runner.sock)" >&2
"$bin" eval --address "unix:$work/runner.sock" --image "$image" \
  < examples/resourcelists/hello-namespace.yaml
