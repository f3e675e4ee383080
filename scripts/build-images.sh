#!/usr/bin/env bash
#
# build-images.sh — build krm-fn-runner's two container images with buildah,
# laid out as Porch's (images/*.Containerfile), and optionally push them.
#
# Usage: scripts/build-images.sh [--push] [--tls-verify=false] [RUNNER_IMAGE [WRAPPER_IMAGE]]
#        scripts/build-images.sh --binaries-only
#   RUNNER_IMAGE   default localhost/krm-fn-runner:latest
#   WRAPPER_IMAGE  default localhost/krm-fn-wrapper-server:latest
#   --push         push both to their registries (docker://IMAGE) and print
#                  "IMAGE DIGEST" for each on stdout
#   --tls-verify=false  push over plain HTTP / without verifying TLS
#   --binaries-only  step 1 only (scripts/build-tools.sh builds them beside
#                  the Go tools; a later run finds them built)
#
# Steps:
#   1. the four binaries, static (x86_64-unknown-linux-musl, cargo profile
#      `image`: release, thin LTO, line tables), in
#      ${KRM_FN_IMAGE_TARGET_DIR:-CACHE/image-target} so that dependencies
#      are compiled once per machine; then each is split with objcopy into a
#      stripped binary and its debug info, TARGET_DIR/image-bin/NAME and
#      NAME.debug (the binary names the .debug file: gdb and other debuggers
#      find it through its .gnu_debuglink section);
#   2. the catalog function binaries (scripts/install-catalog-functions.sh,
#      static Go builds) and their config.yaml;
#   3. a staged build context per image, then `buildah bud` FROM scratch with
#      a fixed timestamp (same inputs, same digest).
#
# Needs: cargo + rustup (adds the musl target when missing), Go, and the
# Debian packages buildah, binutils (objcopy), musl-tools (musl-gcc), busybox-static (the
# wrapper image's `cp`, or KRM_FN_STATIC_CP) and ca-certificates. Buildah runs with
# --isolation chroot and the storage driver $STORAGE_DRIVER (default vfs),
# which work without privileges beyond root in a container.
# CACHE is ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}.

set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "build-images: error: $*" >&2; exit 1; }

push=false
tls_verify=true
binaries_only=false
images=()
for arg in "$@"; do
  case "$arg" in
    --push) push=true ;;
    --tls-verify=false) tls_verify=false ;;
    --tls-verify=true) tls_verify=true ;;
    --binaries-only) binaries_only=true ;;
    -*) die "unknown option $arg (see the usage at the top of $0)" ;;
    *) images+=("$arg") ;;
  esac
done
((${#images[@]} <= 2)) || die "at most two images: RUNNER_IMAGE WRAPPER_IMAGE"
RUNNER_IMAGE="${images[0]:-localhost/krm-fn-runner:latest}"
WRAPPER_IMAGE="${images[1]:-localhost/krm-fn-wrapper-server:latest}"

TARGET=x86_64-unknown-linux-musl
CACHE="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}"
TARGET_DIR="${KRM_FN_IMAGE_TARGET_DIR:-$CACHE/image-target}"
CATALOG="${KRM_FN_CATALOG:-$CACHE/catalog}"
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
STATIC_CP="${KRM_FN_STATIC_CP:-/bin/busybox}"
DRIVER="${STORAGE_DRIVER:-vfs}"

$binaries_only || command -v buildah >/dev/null || die "buildah is not installed: apt-get install -y buildah"
command -v musl-gcc >/dev/null || die "musl-gcc is not installed: apt-get install -y musl-tools"
command -v objcopy >/dev/null || die "objcopy is not installed: apt-get install -y binutils"
[[ -f "$CA_BUNDLE" ]] || die "$CA_BUNDLE is missing: apt-get install -y ca-certificates"
# busybox-static installs a statically linked /bin/busybox (it runs `cp`
# when called by that name); the `busybox` package's is dynamic and would not
# run in the image. KRM_FN_STATIC_CP names another static `cp` instead.
if [[ -z "${KRM_FN_STATIC_CP:-}" ]] && ! dpkg -S "$STATIC_CP" 2>/dev/null | grep -q '^busybox-static:'; then
  die "a static $STATIC_CP is missing: apt-get install -y busybox-static"
fi
[[ -x "$STATIC_CP" ]] || die "$STATIC_CP is not an executable file"

start=$SECONDS
if ! rustup target list --installed | grep -qx "$TARGET"; then
  echo "build-images: adding the Rust target $TARGET" >&2
  rustup target add "$TARGET" >&2
fi
echo "build-images: building the static binaries ($TARGET, profile image)" >&2
CC_x86_64_unknown_linux_musl=musl-gcc \
  cargo build --profile image --target "$TARGET" --target-dir "$TARGET_DIR" \
  --bin krm-fn-runner --bin wrapper-server --bin grpc-health-probe --bin krm-fn-supervisor >&2
built="$TARGET_DIR/$TARGET/image"
bins="$TARGET_DIR/image-bin"
mkdir -p "$bins"
for bin in krm-fn-runner wrapper-server grpc-health-probe krm-fn-supervisor; do
  # The debug link is the file name only: debuggers look for it beside the
  # binary (or in its .debug/ directory, or under /usr/lib/debug).
  objcopy --only-keep-debug "$built/$bin" "$bins/$bin.debug"
  (cd "$bins" && objcopy --strip-all --add-gnu-debuglink="$bin.debug" "$built/$bin" "$bin")
  echo "build-images: $bin $(stat -c %s "$bins/$bin") bytes stripped, debug info in $bins/$bin.debug" >&2
done
echo "build-images: binaries ready after $((SECONDS - start))s" >&2
if $binaries_only; then
  exit 0
fi

bash scripts/install-catalog-functions.sh "$CATALOG" >&2

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/runner/functions" "$ctx/runner/tmp" "$ctx/wrapper"
chmod 1777 "$ctx/runner/tmp"
cp "$bins/krm-fn-runner" "$ctx/runner/server"
cp "$bins/grpc-health-probe" "$ctx/runner/grpc-health-probe"
cp "$bins/krm-fn-supervisor" "$ctx/runner/krm-fn-supervisor"
cp "$CATALOG/config.yaml" "$ctx/runner/config.yaml"
cp "$CATALOG"/bin/* "$ctx/runner/functions/"
cp "$CA_BUNDLE" "$ctx/runner/ca-certificates.crt"
cp "$bins/wrapper-server" "$bins/grpc-health-probe" "$bins/krm-fn-supervisor" "$ctx/wrapper/"
cp "$STATIC_CP" "$ctx/wrapper/cp"
# /wrapper-server, Porch v1.5.3's layout, as a link to the current one.
mkdir -p "$ctx/wrapper/links"
ln -s home/nonroot/wrapper-server "$ctx/wrapper/links/wrapper-server"
chmod -R go-w "$ctx/runner" "$ctx/wrapper"
chmod 1777 "$ctx/runner/tmp"

bah() { buildah --storage-driver "$DRIVER" "$@"; }
build() { # IMAGE CONTAINERFILE CONTEXT
  echo "build-images: building $1" >&2
  bah bud --isolation chroot --timestamp 0 --quiet -f "$2" -t "$1" "$3" >/dev/null
}
build "$RUNNER_IMAGE" images/runner.Containerfile "$ctx/runner"
build "$WRAPPER_IMAGE" images/wrapper-server.Containerfile "$ctx/wrapper"
for image in "$RUNNER_IMAGE" "$WRAPPER_IMAGE"; do
  echo "build-images: $image, $(bah images --noheading --format '{{.Size}}' "$image") uncompressed" >&2
done

if $push; then
  for image in "$RUNNER_IMAGE" "$WRAPPER_IMAGE"; do
    bah push --quiet --tls-verify="$tls_verify" --digestfile "$ctx/digest" "$image" "docker://$image" >&2
    echo "$image $(<"$ctx/digest")"
  done
fi
echo "build-images: done in $((SECONDS - start))s" >&2
