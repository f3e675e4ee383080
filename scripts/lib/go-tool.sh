# Shared by the scripts that build one command from the Go module proxy and
# cache it per machine (scripts/build-kpt.sh, scripts/build-kustomize.sh).
#
# build_go_tool NAME MODULE VERSION FORMAT [go install flags...]
#   Builds command NAME of MODULE@VERSION with `go install` into
#   ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/NAME/VERSION/NAME, checks that
#   `NAME version` runs (or `NAME $GO_TOOL_CHECK` when that is set, for tools
#   whose version is a flag), and prints its path (progress on stderr).
#   The command is MODULE's main package, or $GO_TOOL_PACKAGE (a package
#   path inside MODULE) when that is set. A stamp
#   records FORMAT, module and version: when it matches and the binary is
#   there, the path is printed at once without calling go. Exits with a
#   message naming build-NAME on any failure.
build_go_tool() {
  local name="$1" module="$2" version="$3" format="$4"
  shift 4
  local dest="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/$name/$version"
  local bin="$dest/$name" stamp="$dest/.stamp"
  local want="$format $module@$version"
  if [[ -x "$bin" && -f "$stamp" && "$(<"$stamp")" == "$want" ]]; then
    echo "$bin"
    return 0
  fi
  mkdir -p "$dest"
  rm -f "$stamp"   # a partial build must never look complete

  die() { echo "build-$name: error: $*" >&2; exit 1; }
  # shellcheck source=scripts/lib/go-proxy.sh
  source "$(dirname "${BASH_SOURCE[0]}")/go-proxy.sh"

  local start=$SECONDS
  echo "build-$name: downloading $module@$version" >&2
  go_download "$module" "$version" >/dev/null
  echo "build-$name: building $name $version" >&2
  go_install_cached "$workdir/bin" "${GO_TOOL_PACKAGE:-$module}" "$version" "$@"
  [[ -x "$workdir/bin/$name" ]] || die "go install $module@$version did not produce a $name binary"
  "$workdir/bin/$name" "${GO_TOOL_CHECK:-version}" >/dev/null 2>&1 || die "the built $name binary does not run"

  mv -f "$workdir/bin/$name" "$bin"
  printf '%s\n' "$want" >"$stamp"
  echo "build-$name: $name $version ready in $((SECONDS - start))s" >&2
  echo "$bin"
}
