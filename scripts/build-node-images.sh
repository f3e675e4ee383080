#!/usr/bin/env bash
# Builds the container images the real-node test bed (testbed/src/node_support.rs)
# runs, with buildah, and pushes them into a registry storage directory that
# every node start copies and serves (docker-registry's filesystem storage is
# independent of the address it is served on). Prints that directory's
# parent: it holds `registry/` (the storage) and `images.txt`
# ("<repository:tag> <manifest digest>" per image).
#
# Images (repository paths; the node's registry adds its host:port):
#   pause:3.10                     the pod sandbox: Kubernetes' pause.c, static
#                                  (scripts/build-node.sh)
#   krm/wrapper-server:node        this checkout's wrapper-server image
#                                  (scripts/build-images.sh: static binaries,
#                                  laid out as Porch's wrapper image)
#   porch/wrapper-server:v1.5.3    Porch v1.5.3's wrapper server and
#                                  grpc-health-probe (scripts/build-porch.sh),
#                                  laid out as Porch's func/Dockerfile-wrapperserver
#                                  (/wrapper-server/), with a static `cp`
#   krm-fn/<function>:<version>    the catalog functions
#                                  (scripts/install-catalog-functions.sh), each a
#                                  static Go binary FROM scratch at
#                                  /usr/local/bin/function, its ENTRYPOINT, as
#                                  the catalog ships them
#
# The result is cached per machine under a key made of every input's
# content (the binaries, the Containerfiles written here): a change to the
# wrapper server rebuilds it, anything else answers at once.
#
# Usage: scripts/build-node-images.sh
# Needs: buildah, docker-registry, busybox-static (and what the scripts
# above need). Pushes go to a registry this script starts on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "build-node-images: error: $*" >&2; exit 1; }
command -v buildah >/dev/null || die "buildah is not installed: apt-get install -y buildah"
[[ -x /usr/bin/docker-registry ]] || die "docker-registry is not installed: apt-get install -y docker-registry"
[[ -x /bin/busybox ]] || die "a static /bin/busybox is missing: apt-get install -y busybox-static"

CACHE="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}"
DRIVER="${STORAGE_DRIVER:-vfs}"
FORMAT="build-node-images format 1"

node_bins="$(bash scripts/build-node.sh)"
porch="$(bash scripts/build-porch.sh)"
catalog="${KRM_FN_CATALOG:-$CACHE/catalog}"
bash scripts/install-catalog-functions.sh "$catalog" >&2
# The wrapper image of this checkout: builds (or reuses) the static binaries.
bash scripts/build-images.sh localhost/krm-fn-runner:node localhost/krm-fn-wrapper-server:node >&2
wrapper_bins="${KRM_FN_IMAGE_TARGET_DIR:-$CACHE/image-target}/image-bin"

mapfile -t functions < <(awk '{print $1 " " $2}' "$catalog/versions.txt")
key="$(
  {
    echo "$FORMAT"
    sha256sum "$node_bins/pause" "$porch/porch-wrapper-server" "$porch/grpc-health-probe" \
      "$wrapper_bins/wrapper-server" "$wrapper_bins/grpc-health-probe" "$wrapper_bins/krm-fn-supervisor" \
      images/wrapper-server.Containerfile /bin/busybox | awk '{print $1}'
    for f in "${functions[@]}"; do
      set -- $f
      echo "$1 $2 $(sha256sum "$catalog/bin/$1" | awk '{print $1}')"
    done
  } | sha256sum | cut -c1-16
)"
dest="$CACHE/node-images/$key"
if [[ -f "$dest/.stamp" ]]; then
  echo "$dest"
  exit 0
fi
echo "build-node-images: building the node's images ($key)" >&2
rm -rf "$CACHE/node-images"   # older keys: one set per machine is enough
mkdir -p "$dest"
work="$(mktemp -d)"
registry_pid=
cleanup() {
  if [[ -n "$registry_pid" ]]; then
    kill "$registry_pid" 2>/dev/null || true
    wait "$registry_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

bah() { buildah --storage-driver "$DRIVER" "$@"; }
build() { # build IMAGE CONTEXT (Containerfile in CONTEXT)
  bah bud --isolation chroot --timestamp 0 --quiet -f "$2/Containerfile" -t "$1" "$2" >/dev/null
}

mkdir -p "$work/pause"
cp "$node_bins/pause" "$work/pause/pause"
cat >"$work/pause/Containerfile" <<'EOF'
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
EOF
build localhost/krm-node/pause:3.10 "$work/pause"

mkdir -p "$work/porch"
cp "$porch/porch-wrapper-server" "$work/porch/wrapper-server"
cp "$porch/grpc-health-probe" "$work/porch/grpc-health-probe"
cp /bin/busybox "$work/porch/cp"
cat >"$work/porch/Containerfile" <<'EOF'
FROM scratch
COPY cp /bin/cp
COPY wrapper-server grpc-health-probe /wrapper-server/
ENV PATH=/bin
EOF
build localhost/krm-node/porch-wrapper-server:v1.5.3 "$work/porch"

images=(
  "localhost/krm-node/pause:3.10 pause:3.10"
  "localhost/krm-fn-wrapper-server:node krm/wrapper-server:node"
  "localhost/krm-node/porch-wrapper-server:v1.5.3 porch/wrapper-server:v1.5.3"
)
for f in "${functions[@]}"; do
  set -- $f
  mkdir -p "$work/fn-$1"
  cp "$catalog/bin/$1" "$work/fn-$1/function"
  cat >"$work/fn-$1/Containerfile" <<'EOF'
FROM scratch
COPY function /usr/local/bin/function
ENTRYPOINT ["/usr/local/bin/function"]
EOF
  build "localhost/krm-node/$1:$2" "$work/fn-$1"
  images+=("localhost/krm-node/$1:$2 krm-fn/$1:$2")
done

# A registry on a free loopback port, storing into $dest/registry.
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$work/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $dest/registry}
http:
  addr: 127.0.0.1:$port
EOF
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/v2/" >/dev/null && break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$port/v2/" >/dev/null || die "the registry did not start: $(cat "$work/registry.log")"
: >"$dest/images.txt"
for i in "${images[@]}"; do
  set -- $i
  bah push --quiet --tls-verify=false --digestfile "$work/digest" "$1" "docker://127.0.0.1:$port/$2" >&2
  echo "$2 $(<"$work/digest")" >>"$dest/images.txt"
  echo "build-node-images: $2 $(<"$work/digest")" >&2
done
echo "$key" >"$dest/.stamp"
echo "$dest"
