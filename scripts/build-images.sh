#!/usr/bin/env bash
# Builds the sandbox images without any registry:
#   openma/sandbox-base:<tag>     Debian bookworm minbase + node, npm, bash, coreutils, tar, unzip, ripgrep,
#                                 git, curl, python3 with pip and venv
#   openma/sandbox-busybox:<tag>  a static busybox only, for fast tests
#   openma/sandbox-dev:<tag>      opt-in (OPENMA_DEV_IMAGE=1): the base plus the toolchain of a cloud dev
#                                 container: wget, python3 headers, build-essential,
#                                 jq, unzip/zip, openssh-client, ... (docs/images.md: size, build time)
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
#   OPENMA_NPM_DIR         npm package directory copied into the base and dev images (default: the npm
#                          running this script under `npm run`, else the one on PATH)
#   OPENMA_DEV_IMAGE       1: also build the dev image (default 0: it takes several minutes more)
#   OPENMA_STATE_DIR       default /var/lib/openma
#   OPENMA_DEB_CACHE       where debootstrap keeps downloaded packages (default /var/cache/openma/debootstrap)
set -euo pipefail

SUITE=bookworm
MIRROR="${OPENMA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# The least a coding agent needs to work in a default session: clone (git), fetch (curl), install
# (npm from our Node, python3 -m pip into a venv). Recommends are not pulled (debootstrap never does).
INCLUDE=bash,coreutils,tar,gzip,unzip,ripgrep,libstdc++6,ca-certificates,procps,git,curl,python3,python3-pip,python3-venv
# The rest of a cloud dev container's toolchain.
DEV_INCLUDE="$INCLUDE,wget,python3-dev,build-essential,pkg-config,jq,zip,xz-utils,bzip2,openssh-client,less,file,patch,tree,sqlite3,gnupg,netbase"
WITH_DEV="${OPENMA_DEV_IMAGE:-0}"
STATE_DIR="${OPENMA_STATE_DIR:-/var/lib/openma}"
ROOTFS_DIR="$STATE_DIR/rootfs"
DEB_CACHE="${OPENMA_DEB_CACHE:-/var/cache/openma/debootstrap}"
MANIFEST="$STATE_DIR/images.json"
BASE_REPO=openma/sandbox-base
BUSYBOX_REPO=openma/sandbox-busybox
DEV_REPO=openma/sandbox-dev
# The unprivileged identity sandboxes run as (the Docker driver's default user, bubblewrap's default sandbox uid).
AGENT_UID=1000
AGENT_HOME=/home/agent
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

# npm is plain JavaScript: the images get the one driving this build (npm_execpath under `npm run`).
NPM_DIR=""
if [ -n "${OPENMA_NPM_DIR:-}" ]; then
  NPM_DIR="$OPENMA_NPM_DIR"
elif [ -n "${npm_execpath:-}" ] && [ -f "$npm_execpath" ]; then
  NPM_DIR="$(dirname "$(dirname "$(readlink -f "$npm_execpath")")")"
elif command -v npm >/dev/null 2>&1; then
  NPM_DIR="$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")"
fi
[ -n "$NPM_DIR" ] && [ -f "$NPM_DIR/bin/npm-cli.js" ] && [ -f "$NPM_DIR/package.json" ] ||
  die "no npm package directory to copy into the images (set OPENMA_NPM_DIR)"
NPM_DIR="$(readlink -f "$NPM_DIR")"
NPM_VERSION="$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$NPM_DIR/package.json" | head -1)"
NPM_HASH="$(tar --sort=name --mtime=@0 --owner=0 --group=0 -C "$NPM_DIR" -c . | sha256sum | cut -d' ' -f1)"

SCRIPT_PATH="$(readlink -f "${BASH_SOURCE[0]}")"
hash_inputs() {
  {
    printf 'suite=%s include=%s path=%s\n' "$SUITE" "$INCLUDE" "$SANDBOX_PATH"
    sha256sum "$SCRIPT_PATH" | cut -d' ' -f1
    sha256sum "$NODE_BIN" | cut -d' ' -f1
    sha256sum "$BUSYBOX_BIN" | cut -d' ' -f1
    printf 'npm=%s %s\n' "$NPM_VERSION" "$NPM_HASH"
  } | sha256sum | cut -c1-16
}
TAG="$(hash_inputs)"
BASE_IMAGE="$BASE_REPO:$TAG"
BUSYBOX_IMAGE="$BUSYBOX_REPO:$TAG"
BASE_ROOTFS="$ROOTFS_DIR/$TAG"
BUSYBOX_ROOTFS="$ROOTFS_DIR/busybox-$TAG"
# The dev image's recipe adds its package list.
if [ "$WITH_DEV" = 1 ]; then
  DEV_TAG="$(printf '%s dev-include=%s\n' "$TAG" "$DEV_INCLUDE" | sha256sum | cut -c1-16)"
  DEV_IMAGE="$DEV_REPO:$DEV_TAG"
  DEV_ROOTFS="$ROOTFS_DIR/dev-$DEV_TAG"
fi

# A rootfs counts only once its build finished: partial builds are thrown away.
complete() { [ -f "$1/.openma-rootfs" ] && [ "$(cat "$1/.openma-rootfs")" = "${2:-$TAG}" ]; }
image_present() { docker image inspect "$1" >/dev/null 2>&1; }

# Directories every sandbox mounts over; present in the image so mounts never need mkdir.
sandbox_dirs() {
  mkdir -p "$1/workspace" "$1/mnt/session/outputs" "$1/tmp" "$1/run/openma" "$1$AGENT_HOME"
  chmod 1777 "$1/tmp"
  chown "$AGENT_UID:$AGENT_UID" "$1$AGENT_HOME"
}

# The agent user, so `id`, `whoami` and tools that look up $HOME by uid work (the Docker driver runs as it).
add_agent_user() {
  grep -q "^agent:" "$1/etc/passwd" ||
    printf 'agent:x:%s:%s:agent:%s:%s\n' "$AGENT_UID" "$AGENT_UID" "$AGENT_HOME" "$2" >>"$1/etc/passwd"
  grep -q "^agent:" "$1/etc/group" || printf 'agent:x:%s:\n' "$AGENT_UID" >>"$1/etc/group"
}

# Our Node and npm (plain JavaScript) under /usr/local.
install_node() {
  install -m 0755 "$NODE_BIN" "$1/usr/local/bin/node"
  mkdir -p "$1/usr/local/lib/node_modules"
  rm -rf "$1/usr/local/lib/node_modules/npm"
  cp -a "$NPM_DIR" "$1/usr/local/lib/node_modules/npm"
  chown -R 0:0 "$1/usr/local/lib/node_modules/npm"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"
}

# Size hogs a sandbox never reads (docs, man pages, package caches, logs).
trim_rootfs() {
  rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* \
    "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/info/* "$1"/var/log/*.log
}

# `check_tools <rootfs> <command>...`: each command runs inside the rootfs, or the build fails naming it.
check_tools() {
  local rootfs="$1" tool
  shift
  for tool in "$@"; do
    # shellcheck disable=SC2086 # the words of $tool are the command and its arguments
    chroot "$rootfs" /usr/bin/env PATH="$SANDBOX_PATH" HOME=/root $tool >/dev/null 2>&1 || die "${rootfs##*/}: \`$tool\` does not run"
  done
}

build_base_rootfs() {
  local work="$BASE_ROOTFS.partial" started=$SECONDS
  rm -rf "$work"
  mkdir -p "$work" "$DEB_CACHE"
  log "debootstrap --variant=minbase $SUITE ($MIRROR) -> $work"
  debootstrap --variant=minbase --include="$INCLUDE" --cache-dir="$DEB_CACHE" "$SUITE" "$work" "$MIRROR" >&2
  install_node "$work"
  # Unused in a sandbox with no network and no package manager runs; keeps the image small.
  trim_rootfs "$work"
  add_agent_user "$work" /bin/bash
  sandbox_dirs "$work"
  [ "$(chroot "$work" /usr/local/bin/node --version)" = "$NODE_VERSION" ] || die "node does not run inside the base rootfs"
  [ "$(chroot "$work" /usr/local/bin/node /usr/local/bin/npm --version)" = "$NPM_VERSION" ] || die "npm does not run inside the base rootfs"
  check_tools "$work" "git --version" "curl --version" "python3 -m pip --version" "python3 -m venv --help"
  printf '%s' "$TAG" >"$work/.openma-rootfs"
  rm -rf "$BASE_ROOTFS"
  mv "$work" "$BASE_ROOTFS"
  log "base rootfs built in $((SECONDS - started)) s ($(du -sh "$BASE_ROOTFS" | cut -f1))"
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
  add_agent_user "$work" /bin/sh
  sandbox_dirs "$work"
  printf '%s' "$TAG" >"$work/.openma-rootfs"
  rm -rf "$BUSYBOX_ROOTFS"
  mv "$work" "$BUSYBOX_ROOTFS"
}

build_dev_rootfs() {
  local work="$DEV_ROOTFS.partial" started=$SECONDS
  rm -rf "$work"
  mkdir -p "$work" "$DEB_CACHE"
  log "debootstrap --variant=minbase $SUITE with the dev toolchain ($MIRROR) -> $work"
  debootstrap --variant=minbase --include="$DEV_INCLUDE" --cache-dir="$DEB_CACHE" "$SUITE" "$work" "$MIRROR" >&2
  install_node "$work"
  # Debian's python refuses `pip install` outside a venv (PEP 668); agents use `python3 -m venv` or `pip --user`.
  # C.UTF-8 ships with libc; no locale generation needed.
  trim_rootfs "$work"
  add_agent_user "$work" /bin/bash
  sandbox_dirs "$work"
  check_tools "$work" "git --version" "curl --version" "wget --version" "python3 -m pip --version" "python3 -m venv --help" \
    "npm --version" "gcc --version" "make --version" "jq --version" "rg --version" "ssh -V" "unzip -v"
  printf '%s' "$DEV_TAG" >"$work/.openma-rootfs"
  rm -rf "$DEV_ROOTFS"
  mv "$work" "$DEV_ROOTFS"
  log "dev rootfs built in $((SECONDS - started)) s ($(du -sh "$DEV_ROOTFS" | cut -f1))"
}

import_image() {
  local rootfs="$1" image="$2" label="$3" node_version="$4" tag="${5:-$TAG}"
  log "docker import $rootfs -> $image"
  tar --numeric-owner --exclude=./.openma-rootfs -C "$rootfs" -c . |
    docker import \
      --change "ENV PATH=$SANDBOX_PATH" \
      --change "ENV LANG=C.UTF-8" \
      --change "WORKDIR /workspace" \
      --change "LABEL openma.image=$label" \
      --change "LABEL openma.image.tag=$tag" \
      --change "LABEL openma.node.version=$node_version" \
      - "$image" >/dev/null
}

mkdir -p "$ROOTFS_DIR"
complete "$BUSYBOX_ROOTFS" || build_busybox_rootfs
image_present "$BUSYBOX_IMAGE" || import_image "$BUSYBOX_ROOTFS" "$BUSYBOX_IMAGE" busybox none
complete "$BASE_ROOTFS" || build_base_rootfs
image_present "$BASE_IMAGE" || import_image "$BASE_ROOTFS" "$BASE_IMAGE" base "$NODE_VERSION"
DEV_ENTRY=""
if [ "$WITH_DEV" = 1 ]; then
  complete "$DEV_ROOTFS" "$DEV_TAG" || build_dev_rootfs
  image_present "$DEV_IMAGE" || import_image "$DEV_ROOTFS" "$DEV_IMAGE" dev "$NODE_VERSION" "$DEV_TAG"
  DEV_ENTRY=",
  \"dev\": { \"image\": \"$DEV_IMAGE\", \"rootfs\": \"$DEV_ROOTFS\", \"node\": \"$NODE_VERSION\", \"npm\": \"$NPM_VERSION\" }"
fi

# Written last and atomically: readers never see a manifest naming a missing image.
tmp="$MANIFEST.tmp.$$"
cat >"$tmp" <<EOF
{
  "tag": "$TAG",
  "base": { "image": "$BASE_IMAGE", "rootfs": "$BASE_ROOTFS", "node": "$NODE_VERSION", "npm": "$NPM_VERSION" },
  "busybox": { "image": "$BUSYBOX_IMAGE", "rootfs": "$BUSYBOX_ROOTFS" }$DEV_ENTRY
}
EOF
mv "$tmp" "$MANIFEST"

log "manifest: $MANIFEST"
printf 'base image:     %s (node %s, npm %s)\n' "$BASE_IMAGE" "$NODE_VERSION" "$NPM_VERSION"
printf 'base rootfs:    %s\n' "$BASE_ROOTFS"
printf 'busybox image:  %s\n' "$BUSYBOX_IMAGE"
printf 'busybox rootfs: %s\n' "$BUSYBOX_ROOTFS"
if [ "$WITH_DEV" = 1 ]; then
  printf 'dev image:      %s (node %s, npm %s)\n' "$DEV_IMAGE" "$NODE_VERSION" "$NPM_VERSION"
  printf 'dev rootfs:     %s\n' "$DEV_ROOTFS"
fi
