# Shared by the scripts that build one command from crates.io with
# `cargo install` and cache it per machine (scripts/build-mdbook.sh,
# scripts/build-lychee.sh).
#
# build_cargo_tool NAME CRATE VERSION FORMAT [cargo install flags...]
#   Installs command NAME of CRATE@VERSION with `cargo install --locked`
#   (the crate's own lock file) into
#   ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/NAME/VERSION/bin/NAME, in a
#   target directory of its own that is removed afterwards, checks that
#   `NAME --version` runs, and prints its path (progress on stderr). A stamp
#   records FORMAT, crate, version and flags: when it matches and the binary
#   is there, the path is printed at once without calling cargo. Exits with
#   a message naming build-NAME on any failure.
build_cargo_tool() {
  local name="$1" crate="$2" version="$3" format="$4"
  shift 4
  local dest="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/$name/$version"
  local bin="$dest/bin/$name" stamp="$dest/.stamp"
  local want="$format $crate@$version $*"
  if [[ -x "$bin" && -f "$stamp" && "$(<"$stamp")" == "$want" ]]; then
    echo "$bin"
    return 0
  fi
  die() { echo "build-$name: error: $*" >&2; exit 1; }
  command -v cargo >/dev/null || die "cargo is required (rustup)"
  mkdir -p "$dest"
  rm -f "$stamp"   # a partial build must never look complete

  local start=$SECONDS work
  work="$(mktemp -d)"
  # shellcheck disable=SC2064  # the path is fixed now
  trap "rm -rf '$work'" EXIT
  echo "build-$name: cargo install $crate $version (once per machine)" >&2
  # Not the project's CARGO_TARGET_DIR: the tool's build is its own, and
  # goes once it is installed.
  CARGO_TARGET_DIR="$work/target" cargo install --locked --quiet --force \
    --root "$dest" --version "=$version" "$@" "$crate" >&2 \
    || die "cargo install $crate@$version failed (needs crates.io)"
  [[ -x "$bin" ]] || die "cargo install $crate@$version did not produce a $name binary"
  "$bin" --version >/dev/null 2>&1 || die "the built $name binary does not run"
  printf '%s\n' "$want" >"$stamp"
  echo "build-$name: $name $version ready in $((SECONDS - start))s" >&2
  echo "$bin"
}
