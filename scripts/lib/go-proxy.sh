# Shared by the scripts that build Go programs from the Go module proxy
# (scripts/install-catalog-functions.sh, scripts/build-kpt.sh). Source it
# after defining die(); it then:
#   - makes a temporary work directory ($workdir), removed on exit, and cds
#     into it so no surrounding go.mod / go.work is picked up;
#   - exports the Go settings these builds need;
#   - defines go_download and go_install_cached.

command -v go >/dev/null 2>&1 || die "go is not installed (https://go.dev/dl/)"

workdir="$(mktemp -d)"
trap 'rm -rf "$workdir"' EXIT
cd "$workdir"

GOMODCACHE_DIR="$(go env GOMODCACHE)"
BASE_PROXY="$(go env GOPROXY)"
export GOWORK=off
export GOTOOLCHAIN=auto          # fetch a newer toolchain if a module needs one
export GOFLAGS="${GOFLAGS:-} -mod=mod"
# sum.golang.org lookups for these modules answer 404 through the proxy here;
# their dependencies are still verified against each module's own go.sum.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/kptdev,github.com/GoogleContainerTools"
# `go install MODULE@VERSION` also reads the module's @v/list (deprecation
# check), which the proxy refuses. Serve that from the local download cache
# first (filled by go_download), then fall through to the proxy.
INSTALL_PROXY="file://$GOMODCACHE_DIR/cache/download,$BASE_PROXY"

# Prints the value of a top-level string field of `go mod download -json` output.
json_field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" | head -n 1; }

# go_download MODULE VERSION: downloads the module into the module cache and
# prints its directory; dies with the proxy's error otherwise.
go_download() {
  local info dir err
  info="$(go mod download -json "$1@$2" 2>&1)" || true
  dir="$(json_field Dir <<<"$info")"
  if [[ -z "$dir" || ! -d "$dir" ]]; then
    err="$(json_field Error <<<"$info")"
    die "cannot download $1@$2: $(printf '%b' "${err:-$info}")"
  fi
  echo "$dir"
}

# go_install_cached GOBIN MODULE VERSION [go install flags...]: installs a
# module downloaded by go_download into GOBIN; dies with the build log.
go_install_cached() {
  local bin="$1" mod="$2" ver="$3"
  shift 3
  if ! GOBIN="$bin" GOPROXY="$INSTALL_PROXY" go install "$@" "$mod@$ver" >"$workdir/build.log" 2>&1; then
    cat "$workdir/build.log" >&2
    die "go install $mod@$ver failed"
  fi
}
