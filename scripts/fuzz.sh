#!/usr/bin/env bash
# Fuzzes the parsers with libFuzzer (fuzz/: ResourceList parsing, the
# request check, Kptfile parsing, the comment-preserving editor, the
# builtin apply-setters' setter comments, the builtin apply-replacements'
# field paths and the
# simulator's trace and policy parsers), on stable Rust: the fuzz crate is
# built with the sanitizer-coverage passes cargo-fuzz would add (no
# sanitizer runtime, so no nightly), into target/fuzz.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Each target starts from its committed corpus (fuzz/corpus/TARGET, read
# only) and writes what it finds to ${KRM_FN_FUZZ_WORK:-target/fuzz/work}.
# Exits non-zero on the first crash, leaving the input beside the work
# corpus (crash-*); prints executions per target.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(resource_list request kptfile preserve simulation setters replacements)
fi
work="${KRM_FN_FUZZ_WORK:-target/fuzz/work}"
host="$(rustc -vV | sed -n 's/^host: //p')"

# Coverage instrumentation as cargo-fuzz sets it; --target keeps it off
# build scripts and proc macros.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
cargo build --release --manifest-path fuzz/Cargo.toml --target-dir target/fuzz \
  --target "$host" --bins >&2

status=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  if ! "target/fuzz/$host/release/$t" "$work/$t" "fuzz/corpus/$t" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$work/$t-" -print_final_stats=1 >"$log" 2>&1; then
    echo "fuzz target $t FAILED; see $log and $work/$t-crash-*" >&2
    tail -40 "$log" >&2
    status=1
  fi
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  echo "fuzz $t: ${runs:-?} executions in ${seconds}s, corpus $(ls "$work/$t" | wc -l) new + $(ls "fuzz/corpus/$t" | wc -l) seeds"
done
exit "$status"
