# Shared by the scripts that build Go programs against Porch's module
# (scripts/build-porch.sh, scripts/build-porch-client.sh). Source it after
# defining die() and setting MODULE and VERSION (Porch's module and
# version); then call:
#
# porch_module NAME: sources go-proxy.sh (a temporary $workdir, the Go
#   settings), turns cgo off, downloads $MODULE@$VERSION (its directory in
#   $porch_src), and makes $workdir/NAME a throw-away module
#   `local/NAME` (Porch's Go version), the current directory.
porch_module() {
  # shellcheck source=scripts/lib/go-proxy.sh
  source "$(dirname "${BASH_SOURCE[0]}")/go-proxy.sh"
  export CGO_ENABLED=0
  export GONOSUMDB="$GONOSUMDB,github.com/nephio-project"
  echo "$(basename "$0" .sh): downloading $MODULE@$VERSION" >&2
  porch_src="$(go_download "$MODULE" "$VERSION")"
  mkdir -p "$workdir/$1" && cd "$workdir/$1"
  printf 'module local/%s\n\ngo 1.23.8\n' "$1" >go.mod
}
