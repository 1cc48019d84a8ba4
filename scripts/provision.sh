#!/usr/bin/env bash
# Installs and starts what the local sandbox drivers need: bubblewrap, the
# Docker Engine (docker.io + dockerd), debootstrap and busybox-static for the
# image builder, iproute2 for network checks, and Debian's chromium for the
# console's browser test (test/console), and tmux for the CLI's terminal test (test/cli),
# and Debian's kubectl (kubernetes-client), the second client of the Kubernetes stand-in's tests.
#
# Idempotent: packages already installed are not touched (and `apt-get update`
# runs only when an install needs it); a dockerd that already answers is left
# alone. Safe to run on every CI start.
#
# `--embedded`: only what the embedded default of `openma serve` needs
# (bubblewrap), no Docker Engine. `openma serve` runs this on its first start
# when no sandbox driver is usable (see apps/openma/src/provision.ts).
#
# Environment:
#   OPENMA_DOCKERD_LOG              dockerd log file (default /var/log/openma-dockerd.log)
#   OPENMA_DOCKER_STORAGE_DRIVER    force a storage driver instead of probing overlay2, then vfs
#   OPENMA_DOCKERD_WAIT_SECONDS     how long to wait for `docker info` (default 60)
set -euo pipefail

PACKAGES=(bubblewrap docker.io debootstrap busybox-static iproute2 chromium tmux)
WITH_DOCKER=1
case "${1:-}" in
  "") ;;
  --embedded)
    PACKAGES=(bubblewrap)
    WITH_DOCKER=0
    ;;
  *)
    printf 'usage: provision.sh [--embedded]\n' >&2
    exit 2
    ;;
esac
DOCKERD_LOG="${OPENMA_DOCKERD_LOG:-/var/log/openma-dockerd.log}"
STATE_DIR=/var/lib/openma
WAIT_SECONDS="${OPENMA_DOCKERD_WAIT_SECONDS:-60}"

log() { printf 'provision: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Everything below needs root (package installs, a system daemon). Use sudo
# when we are not root and it exists; otherwise say exactly what is missing.
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo -n); else die "run as root (or install sudo)"; fi
fi
as_root() { "${SUDO[@]}" "$@"; }

missing_packages() {
  local pkg status
  for pkg in "${PACKAGES[@]}"; do
    status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
    [ "$status" = "installed" ] || printf '%s\n' "$pkg"
  done
}

install_packages() {
  local missing
  mapfile -t missing < <(missing_packages)
  if [ "${#missing[@]}" -eq 0 ]; then
    log "packages present: ${PACKAGES[*]}"
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || die "missing packages (${missing[*]}) and no apt-get to install them"
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Try the existing package lists first: an update costs a network round
  # trip per source and is only needed when the lists are absent or stale.
  if ! as_root apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    log "install from cached package lists failed; running apt-get update"
    as_root apt-get update -q
    as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

docker_answers() { as_root docker info >/dev/null 2>&1; }

# overlay2 needs a kernel overlayfs that accepts the backing filesystem; in a
# nested guest it may not, so mount a throwaway overlay to find out. vfs
# always works (full copies: slower and bigger, but correct).
probe_storage_driver() {
  if [ -n "${OPENMA_DOCKER_STORAGE_DRIVER:-}" ]; then
    printf '%s' "$OPENMA_DOCKER_STORAGE_DRIVER"
    return
  fi
  local base="$STATE_DIR/overlay-probe"
  as_root rm -rf "$base"
  as_root mkdir -p "$base"/{lower,upper,work,merged}
  local driver=vfs
  if grep -qw overlay /proc/filesystems || as_root modprobe overlay >/dev/null 2>&1; then
    if as_root mount -t overlay overlay -o "lowerdir=$base/lower,upperdir=$base/upper,workdir=$base/work" "$base/merged" 2>/dev/null; then
      driver=overlay2
      as_root umount "$base/merged" || true
    fi
  fi
  as_root rm -rf "$base"
  printf '%s' "$driver"
}

# A daemon.json that already names a storage driver wins: passing the flag too
# would make dockerd refuse to start ("specified both as a flag and in the
# configuration file").
configured_storage_driver() {
  local config=/etc/docker/daemon.json
  [ -f "$config" ] || return 1
  grep -o '"storage-driver"[[:space:]]*:[[:space:]]*"[^"]*"' "$config" | sed 's/.*"\([^"]*\)"$/\1/'
}

launch_dockerd() {
  local driver="$1"
  shift
  local args=("$@")
  [ -n "$driver" ] && args+=(--storage-driver "$driver")
  log "starting dockerd ${args[*]} (log: $DOCKERD_LOG)"
  as_root mkdir -p "$(dirname "$DOCKERD_LOG")"
  # setsid + nohup: the daemon must outlive this script and the CI step that ran it.
  as_root bash -c 'printf "\n==== %s openma provision: dockerd %s\n" "$(date -Is)" "$*" >>"$0"; nohup setsid dockerd "$@" >>"$0" 2>&1 </dev/null &' \
    "$DOCKERD_LOG" "${args[@]}"
}

wait_for_docker() {
  local deadline=$((SECONDS + $1))
  while [ "$SECONDS" -lt "$deadline" ]; do
    docker_answers && return 0
    # dockerd exited (bad flag, unusable storage driver): stop waiting for it.
    if ! pgrep -x dockerd >/dev/null 2>&1; then
      sleep 0.5
      docker_answers
      return
    fi
    sleep 0.5
  done
  return 1
}

stop_our_dockerd() {
  local pid
  pid="$(cat /var/run/docker.pid 2>/dev/null || true)"
  if [ -n "$pid" ]; then as_root kill "$pid" 2>/dev/null || true; fi
  for _ in $(seq 1 40); do pgrep -x dockerd >/dev/null 2>&1 || return 0; sleep 0.25; done
}

start_docker() {
  if docker_answers; then
    log "dockerd already answers: $(as_root docker info --format '{{.ServerVersion}} storage={{.Driver}}' 2>/dev/null)"
    return 0
  fi
  command -v dockerd >/dev/null 2>&1 || die "dockerd not found after installing docker.io"
  if pgrep -x dockerd >/dev/null 2>&1; then
    # A dockerd is running but not answering yet (still starting): wait for it.
    wait_for_docker "$WAIT_SECONDS" && return 0
    die "a dockerd process exists but does not answer; see $DOCKERD_LOG"
  fi

  local configured candidates=()
  configured="$(configured_storage_driver || true)"
  if [ -n "$configured" ]; then
    candidates=("")
    log "storage driver from /etc/docker/daemon.json: $configured"
  else
    local probed
    probed="$(probe_storage_driver)"
    candidates=("$probed")
    [ "$probed" != vfs ] && candidates+=(vfs)
  fi

  local driver
  for driver in "${candidates[@]}"; do
    launch_dockerd "$driver"
    if wait_for_docker "$WAIT_SECONDS"; then break; fi
    log "dockerd did not come up with storage driver '${driver:-configured}'"
    stop_our_dockerd
    # Some guests have no working iptables/bridge; sandboxes use --network none anyway.
    launch_dockerd "$driver" --iptables=false --bridge=none
    if wait_for_docker "$WAIT_SECONDS"; then break; fi
    log "dockerd did not come up without iptables either"
    stop_our_dockerd
  done
  docker_answers || die "dockerd did not start; see $DOCKERD_LOG"
  local actual
  actual="$(as_root docker info --format '{{.Driver}}')"
  as_root mkdir -p "$STATE_DIR"
  printf '%s\n' "$actual" | as_root tee "$STATE_DIR/docker-storage-driver" >/dev/null
  log "dockerd up: $(as_root docker info --format '{{.ServerVersion}}') storage=$actual (recorded in $STATE_DIR/docker-storage-driver)"
}

# Debian's kubectl. Where another package already owns /usr/bin/kubectl (the
# Cloud SDK's), dpkg refuses the file conflict, so the Debian package is
# unpacked under $STATE_DIR instead of replacing that one; tests look there
# first (packages/standins/kubernetes/src/kubectl.ts).
KUBECTL_DIR="$STATE_DIR/kubernetes-client"
install_kubectl() {
  local status tmp
  status="$(dpkg-query -W -f='${db:Status-Status}' kubernetes-client 2>/dev/null || true)"
  if [ "$status" = "installed" ] || [ -x "$KUBECTL_DIR/usr/bin/kubectl" ]; then
    log "kubectl (kubernetes-client) present"
    return 0
  fi
  if ! dpkg -S /usr/bin/kubectl >/dev/null 2>&1; then
    PACKAGES=(kubernetes-client)
    install_packages
    return 0
  fi
  log "unpacking kubernetes-client under $KUBECTL_DIR (/usr/bin/kubectl belongs to $(dpkg -S /usr/bin/kubectl | cut -d: -f1))"
  tmp="$(mktemp -d)"
  if ! (cd "$tmp" && apt-get download -q kubernetes-client); then
    as_root apt-get update -q
    (cd "$tmp" && apt-get download -q kubernetes-client)
  fi
  as_root mkdir -p "$KUBECTL_DIR"
  as_root dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$KUBECTL_DIR"
  rm -rf "$tmp"
}

install_packages
if [ "$WITH_DOCKER" -eq 1 ]; then install_kubectl; fi
if [ "$WITH_DOCKER" -eq 1 ]; then start_docker; fi
log "bwrap: $(bwrap --version 2>/dev/null || echo missing)"
log "done"
