/**
 * The native-state lifecycle of one ACP binding, over a port that needs only
 * `writeFile` and `exec`: any sandbox (Docker, bubblewrap, a cloud VM, or the
 * supervisor's own process inside one) can provide it.
 *
 * Every shell program here is a constant; paths travel as positional
 * arguments (`sh -c PROGRAM sh ARG...`), so a hostile path cannot inject.
 *
 * Lifecycle: materialize before the agent starts; probe + restore before a
 * resume; capture after each completed turn (the agent is idle: its last
 * PromptResponse arrived) or after it stopped; release on shutdown, sandbox
 * loss or harness replacement (durable copy retained); destroy on Session
 * deletion (both copies gone).
 */
import type { AcpBoundArtifact, AcpStateBinding } from "./binding.ts";
import { type AcpCheckpoint, checkpointDocument, parseCheckpoint, sessionBindingDocument } from "./files.ts";

export interface AcpExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

export interface AcpStatePort {
  /** Writes the whole file (parents exist: callers create them first). */
  writeFile(path: string, content: string): Promise<void>;
  /** Runs argv (no shell unless argv asks for one). */
  exec(argv: readonly string[]): Promise<AcpExecResult>;
}

export class AcpStatePortError extends Error {
  override name = "AcpStatePortError";
}

async function sh(port: AcpStatePort, program: string, args: readonly string[], what: string): Promise<AcpExecResult> {
  const result = await port.exec(["sh", "-c", program, "sh", ...args]);
  if (result.exitCode !== 0) {
    throw new AcpStatePortError(`${what} failed (exit ${result.exitCode}): ${result.stderr.trim().slice(0, 500)}`);
  }
  return result;
}

// $1 kind, $2 source, $3 destination. The copy lands beside the destination
// first and replaces it only when whole, so an interrupted copy never leaves
// a half-written artifact where a resume would read it. A missing source
// removes the destination: the copy mirrors the agent's state, deletions too.
// A sqlite unit is the database with its -wal and -shm: all of them move
// together, and a sidecar absent from the source is removed from the
// destination (a stale WAL beside a newer database would corrupt it).
const COPY_ARTIFACT = `set -e
kind=$1 src=$2 dst=$3
mkdir -p "$(dirname "$dst")"
stage="$dst.openma-partial"
rm -rf "$stage"
case "$kind" in
directory)
  if [ -d "$src" ]; then cp -R "$src" "$stage"; rm -rf "$dst"; mv "$stage" "$dst"; else rm -rf "$dst"; fi ;;
file)
  if [ -f "$src" ]; then cp -p "$src" "$stage"; rm -f "$dst"; mv "$stage" "$dst"; else rm -f "$dst"; fi ;;
sqlite)
  if [ -f "$src" ]; then
    mkdir -p "$stage"
    for s in "" -wal -shm; do if [ -f "$src$s" ]; then cp -p "$src$s" "$stage/db$s"; fi; done
    for s in "" -wal -shm; do rm -f "$dst$s"; done
    for s in "" -wal -shm; do if [ -f "$stage/db$s" ]; then mv "$stage/db$s" "$dst$s"; fi; done
    rm -rf "$stage"
  else
    for s in "" -wal -shm; do rm -f "$dst$s"; done
  fi ;;
*) echo "unknown artifact kind $kind" >&2; exit 2 ;;
esac`;

// $1 directory, $2 sed ERE, $3 replacement: renames every file below $1 whose
// base name the expression changes. An existing target is left alone (never
// overwritten: it is a file the agent wrote under that name itself).
const RENAME_RESTORED = `root=$1 from=$2 to=$3
[ -d "$root" ] || exit 0
find "$root" -type f | while IFS= read -r f; do
  b=\${f##*/}
  n=$(printf '%s\\n' "$b" | sed -E "s/$from/$to/")
  if [ "$n" != "$b" ] && [ ! -e "\${f%/*}/$n" ]; then mv "$f" "\${f%/*}/$n"; fi
done`;

// Args: kind path kind path ...; prints each missing path on its own line.
const PROBE = `while [ $# -gt 1 ]; do
  kind=$1 p=$2; shift 2
  if [ "$kind" = directory ]; then [ -d "$p" ] || echo "$p"; else [ -f "$p" ] || echo "$p"; fi
done`;

const READ_IF_PRESENT = `if [ -f "$1" ]; then cat "$1"; else exit 3; fi`;

// $1 tree to remove, $2 the base whose now-empty ancestors below it go too.
const REMOVE_TREE = `rm -rf "$1"
d=$(dirname "$1")
while [ "$d" != "$2" ] && [ "\${d#"$2"/}" != "$d" ]; do rmdir "$d" 2>/dev/null || break; d=$(dirname "$d"); done`;

export interface AcpProbeResult {
  ok: boolean;
  /** Durable paths of required artifacts that are absent. */
  missing: string[];
}

export class AcpNativeState {
  constructor(
    private readonly port: AcpStatePort,
    readonly binding: AcpStateBinding,
  ) {}

  /** Creates the live native home (and every bound directory) and writes the allowlist manifest. */
  async materialize(): Promise<void> {
    const b = this.binding;
    const dirs = new Set([b.nativePath, b.rootPath, ...Object.values(b.env)]);
    await sh(this.port, `mkdir -p "$@"`, [...dirs], "materialize");
    await this.port.writeFile(b.bindingPath, sessionBindingDocument(b));
  }

  /** Every requiredForResume artifact has a durable copy. Any port error counts as missing (fail toward recovery). */
  async probe(): Promise<AcpProbeResult> {
    const required = this.binding.artifacts.filter((a) => a.requiredForResume);
    if (required.length === 0) return { ok: true, missing: [] };
    try {
      const { stdout } = await sh(
        this.port,
        PROBE,
        required.flatMap((a) => [a.kind, a.path]),
        "probe",
      );
      const missing = stdout.split("\n").filter((l) => l !== "");
      return { ok: missing.length === 0, missing };
    } catch {
      return { ok: false, missing: required.map((a) => a.path) };
    }
  }

  /** Live → durable, for every declared artifact. Call only while the agent is idle or stopped. */
  async capture(): Promise<void> {
    for (const a of this.binding.artifacts) await this.copy(a, a.runtimePath, a.path, "capture");
  }

  /** Durable → live, for every declared artifact, before the agent starts; then the profile's restore renames. */
  async restore(): Promise<void> {
    for (const a of this.binding.artifacts) {
      await this.copy(a, a.path, a.runtimePath, "restore");
      if (a.restoreRename && a.kind === "directory") {
        const { from, to } = a.restoreRename;
        await sh(this.port, RENAME_RESTORED, [a.runtimePath, from, to], `restore rename ${a.runtimePath}`);
      }
    }
  }

  private async copy(a: AcpBoundArtifact, src: string, dst: string, what: string): Promise<void> {
    await sh(this.port, COPY_ARTIFACT, [a.kind, src, dst], `${what} ${a.kind} ${dst}`);
  }

  async readCheckpoint(): Promise<AcpCheckpoint | null> {
    let result: AcpExecResult;
    try {
      result = await this.port.exec(["sh", "-c", READ_IF_PRESENT, "sh", this.binding.checkpointPath]);
    } catch {
      return null;
    }
    if (result.exitCode !== 0) return null;
    return parseCheckpoint(result.stdout, this.binding.profile.id);
  }

  async writeCheckpoint(checkpoint: Omit<AcpCheckpoint, "adapterId">): Promise<void> {
    const doc = checkpointDocument({ adapterId: this.binding.profile.id, ...checkpoint });
    await sh(this.port, `mkdir -p "$1"`, [this.binding.rootPath], "checkpoint directory");
    await this.port.writeFile(this.binding.checkpointPath, doc);
  }

  /** Shutdown, sandbox loss or harness replacement: the live home goes, the durable copy stays. */
  async release(): Promise<void> {
    const b = this.binding;
    await sh(this.port, REMOVE_TREE, [b.ephemeralSessionPath, parentOf(parentOf(b.ephemeralSessionPath))], "release");
  }

  /** Session destruction: both copies go, with the ACP id, the manifest and anything incidental. */
  async destroy(): Promise<void> {
    await this.release();
    const b = this.binding;
    await sh(this.port, REMOVE_TREE, [b.sessionRootPath, parentOf(parentOf(b.sessionRootPath))], "destroy");
  }
}

function parentOf(path: string): string {
  const i = path.lastIndexOf("/");
  return i <= 0 ? "/" : path.slice(0, i);
}
