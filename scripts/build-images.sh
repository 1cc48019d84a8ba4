#!/usr/bin/env bash
# Builds the sandbox images without any registry:
#   openma/sandbox-base:<tag>     Debian bookworm minbase + node, bash, coreutils, tar, unzip, ripgrep
#   openma/sandbox-busybox:<tag>  a static busybox only, for fast tests
# Each is a local rootfs loaded with `docker import`. The rootfs directories
# stay under /var/lib/openma/rootfs/ for the bubblewrap driver.
#
# <tag> is a content hash of the inputs (this script, the node and busybox
# binaries, the package list), so a rerun with unchanged inputs does nothing,
# and a changed input produces a new tag instead of mutating an old one.
# The result is recorded in /var/lib/openma/images.json, which the tests and
# `openma doctor` read.
#
# Environment:
#   OPENMA_DEBIAN_MIRROR   debootstrap mirror (default http://deb.debian.org/debian)
#   OPENMA_NODE_BINARY     node to copy into the base image (default: the `node` on PATH, which under
#                          `npm run provision` is the project's own Node 24 from node_modules/.bin)
#   OPENMA_STATE_DIR       default /var/lib/openma
set -euo pipefail

SUITE=bookworm
MIRROR="${OPENMA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
INCLUDE=bash,coreutils,tar,gzip,unzip,ripgrep,libstdc++6,ca-certificates,procps
STATE_DIR="${OPENMA_STATE_DIR:-/var/lib/openma}"
ROOTFS_DIR="$STATE_DIR/rootfs"
DEB_CACHE=/var/cache/openma/debootstrap
MANIFEST="$STATE_DIR/images.json"
BASE_REPO=openma/sandbox-base
BUSYBOX_REPO=openma/sandbox-busybox
SANDBOX_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

log() { printf 'build-images: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap and docker import need it)"
docker info >/dev/null 2>&1 || die "the Docker Engine does not answer; run: bash scripts/provision.sh (or npm run provision)"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap missing; run: bash scripts/provision.sh"

NODE_BIN="${OPENMA_NODE_BINARY:-$(command -v node || true)}"
[ -n "$NODE_BIN" ] && [ -x "$NODE_BIN" ] || die "no node binary to copy into the base image (set OPENMA_NODE_BINARY)"
NODE_BIN="$(readlink -f "$NODE_BIN")"
NODE_VERSION="$("$NODE_BIN" --version)"
case "$NODE_VERSION" in
  v2[4-9].* | v[3-9][0-9].*) ;;
  *) die "$NODE_BIN is Node $NODE_VERSION; sandboxes run the project's Node >= 24 (run through \`npm run provision\` after \`npm install\`, or set OPENMA_NODE_BINARY)" ;;
esac
BUSYBOX_BIN="$(readlink -f "$(command -v busybox || echo /bin/busybox)")"
[ -x "$BUSYBOX_BIN" ] || die "busybox missing; run: bash scripts/provision.sh"
# A dynamically linked busybox would not run in an image that has no libc.
if ldd "$BUSYBOX_BIN" 2>&1 | grep -q '=>'; then die "$BUSYBOX_BIN is not static; install busybox-static"; fi

SCRIPT_PATH="$(readlink -f "${BASH_SOURCE[0]}")"
hash_inputs() {
  {
    printf 'suite=%s include=%s path=%s\n' "$SUITE" "$INCLUDE" "$SANDBOX_PATH"
    sha256sum "$SCRIPT_PATH" | cut -d' ' -f1
    sha256sum "$NODE_BIN" | cut -d' ' -f1
    sha256sum "$BUSYBOX_BIN" | cut -d' ' -f1
  } | sha256sum | cut -c1-16
}
TAG="$(hash_inputs)"
BASE_IMAGE="$BASE_REPO:$TAG"
BUSYBOX_IMAGE="$BUSYBOX_REPO:$TAG"
BASE_ROOTFS="$ROOTFS_DIR/$TAG"
BUSYBOX_ROOTFS="$ROOTFS_DIR/busybox-$TAG"

# A rootfs counts only once its build finished: partial builds are thrown away.
complete() { [ -f "$1/.openma-rootfs" ] && [ "$(cat "$1/.openma-rootfs")" = "$TAG" ]; }
image_present() { docker image inspect "$1" >/dev/null 2>&1; }

# Directories every sandbox mounts over; present in the image so mounts never need mkdir.
sandbox_dirs() {
  mkdir -p "$1/workspace" "$1/mnt/session/outputs" "$1/tmp" "$1/run/openma"
  chmod 1777 "$1/tmp"
}

build_base_rootfs() {
  local work="$BASE_ROOTFS.partial"
  rm -rf "$work"
  mkdir -p "$work" "$DEB_CACHE"
  log "debootstrap --variant=minbase $SUITE ($MIRROR) -> $work"
  debootstrap --variant=minbase --include="$INCLUDE" --cache-dir="$DEB_CACHE" "$SUITE" "$work" "$MIRROR" >&2
  install -m 0755 "$NODE_BIN" "$work/usr/local/bin/node"
  # Unused in a sandbox with no network and no package manager runs; keeps the image small.
  rm -rf "$work"/var/cache/apt/archives/*.deb "$work"/var/lib/apt/lists/* \
    "$work"/usr/share/doc/* "$work"/usr/share/man/* "$work"/usr/share/info/* "$work"/var/log/*.log
  sandbox_dirs "$work"
  [ "$(chroot "$work" /usr/local/bin/node --version)" = "$NODE_VERSION" ] || die "node does not run inside the base rootfs"
  printf '%s' "$TAG" >"$work/.openma-rootfs"
  rm -rf "$BASE_ROOTFS"
  mv "$work" "$BASE_ROOTFS"
}

build_busybox_rootfs() {
  local work="$BUSYBOX_ROOTFS.partial" applet
  rm -rf "$work"
  mkdir -p "$work/bin" "$work/etc" "$work/root"
  install -m 0755 "$BUSYBOX_BIN" "$work/bin/busybox"
  for applet in $("$BUSYBOX_BIN" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$work/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$work/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$work/etc/group"
  sandbox_dirs "$work"
  printf '%s' "$TAG" >"$work/.openma-rootfs"
  rm -rf "$BUSYBOX_ROOTFS"
  mv "$work" "$BUSYBOX_ROOTFS"
}

import_image() {
  local rootfs="$1" image="$2" label="$3" node_version="$4"
  log "docker import $rootfs -> $image"
  tar --numeric-owner --exclude=./.openma-rootfs -C "$rootfs" -c . |
    docker import \
      --change "ENV PATH=$SANDBOX_PATH" \
      --change "ENV LANG=C.UTF-8" \
      --change "WORKDIR /workspace" \
      --change "LABEL openma.image=$label" \
      --change "LABEL openma.image.tag=$TAG" \
      --change "LABEL openma.node.version=$node_version" \
      - "$image" >/dev/null
}

mkdir -p "$ROOTFS_DIR"
complete "$BUSYBOX_ROOTFS" || build_busybox_rootfs
image_present "$BUSYBOX_IMAGE" || import_image "$BUSYBOX_ROOTFS" "$BUSYBOX_IMAGE" busybox none
complete "$BASE_ROOTFS" || build_base_rootfs
image_present "$BASE_IMAGE" || import_image "$BASE_ROOTFS" "$BASE_IMAGE" base "$NODE_VERSION"

# Written last and atomically: readers never see a manifest naming a missing image.
tmp="$MANIFEST.tmp.$$"
cat >"$tmp" <<EOF
{
  "tag": "$TAG",
  "base": { "image": "$BASE_IMAGE", "rootfs": "$BASE_ROOTFS", "node": "$NODE_VERSION" },
  "busybox": { "image": "$BUSYBOX_IMAGE", "rootfs": "$BUSYBOX_ROOTFS" }
}
EOF
mv "$tmp" "$MANIFEST"

log "manifest: $MANIFEST"
printf 'base image:     %s (node %s)\n' "$BASE_IMAGE" "$NODE_VERSION"
printf 'base rootfs:    %s\n' "$BASE_ROOTFS"
printf 'busybox image:  %s\n' "$BUSYBOX_IMAGE"
printf 'busybox rootfs: %s\n' "$BUSYBOX_ROOTFS"
