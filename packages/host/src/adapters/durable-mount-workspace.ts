/**
 * WorkspacePersistencePort for `durable_mount`: the workspace lives on a
 * host directory (or mounted volume) that the operator declares durable, one
 * directory per session scope. Layout under `<root>/<scope>/`:
 *
 * - `work/<generation>.<binding>/`: a generation's own working tree, bound at
 *   `/workspace`. A generation never writes into a published revision.
 * - `staging/...`: a checkpoint being frozen (never referenced).
 * - `revisions/<id>/{tree,manifest.json}`: immutable revisions; `id` is the
 *   SHA-256 of the manifest (path → type, mode, size, sha256 / link target).
 *
 * Materialize copies the active revision into a fresh working tree (reflink
 * where the filesystem supports it, a plain copy otherwise: never hard
 * links, or a write in the sandbox would change the published revision) and
 * verifies the copy against the manifest. Checkpoint walks the untrusted
 * tree with the persistence walker, copies each file through a descriptor
 * opened without following links (so a swapped symlink cannot pull host
 * files in), fsyncs files and directories, and renames the staged tree into
 * `revisions/`. Only the fenced publication makes a revision active; a stale
 * generation's tree and revision are never published and `sweep` removes them.
 */
import { createHash, randomUUID } from "node:crypto";
import { constants } from "node:fs";
import { chmod, cp, mkdir, open, readdir, readFile, rename, rm, stat, symlink } from "node:fs/promises";
import { join } from "node:path";
import {
  canonicalJson,
  runtimeScopeKey,
  WORKSPACE_MOUNT_PATH,
  type WorkspaceBinding,
  type WorkspaceCandidateRef,
  type WorkspaceMaterializeResult,
  type WorkspacePersistencePort,
  type WorkspaceStrategyOffer,
} from "@openma/contract";
import {
  type CheckpointLimits,
  DEFAULT_CHECKPOINT_LIMITS,
  HEX64,
  type Issue,
  issue,
  openVerified,
  sameStamp,
  stampOf,
  symlinkStaysInside,
  type TreeEntry,
  walkTree,
} from "@openma/persistence";
import { sha256Hex } from "@openma/storage/blobs";

export const DURABLE_MOUNT_FORMAT = "openma.durable-mount-revision";

export interface DurableMountWorkspaceOptions {
  /** The durable host directory or mounted volume. */
  root: string;
  /**
   * Only the operator knows whether `root` survives host loss (a network
   * volume does, a tmpfs does not). Default false: `best_effort`, which a
   * durable profile refuses at admission.
   */
  durable?: boolean;
  limits?: Partial<CheckpointLimits>;
  /** Test seam: runs after a file is opened for the checkpoint copy and before it is read. */
  afterOpen?: (path: string) => Promise<void> | void;
}

export type RevisionEntry =
  | { path: string; type: "dir"; mode: number }
  | { path: string; type: "file"; mode: number; size: number; sha256: string }
  | { path: string; type: "symlink"; target: string };

export interface RevisionManifest {
  format: typeof DURABLE_MOUNT_FORMAT;
  version: 1;
  /** Sorted by path, parents before children. */
  entries: RevisionEntry[];
}

type Input<K extends "materialize" | "checkpoint" | "release" | "discard"> = Parameters<WorkspacePersistencePort[K]>[0];
type FileEntry = Extract<TreeEntry, { type: "file" }>;

const READ_BYTES = 1024 * 1024;

export class DurableMountWorkspace implements WorkspacePersistencePort {
  readonly capabilities: readonly WorkspaceStrategyOffer[];
  readonly #root: string;
  readonly #limits: CheckpointLimits;
  readonly #afterOpen: DurableMountWorkspaceOptions["afterOpen"];

  constructor(options: DurableMountWorkspaceOptions) {
    this.#root = options.root;
    this.#afterOpen = options.afterOpen;
    this.#limits = { ...DEFAULT_CHECKPOINT_LIMITS, ...options.limits };
    this.capabilities = [{ strategy: "durable_mount", durability: options.durable === true ? "durable" : "best_effort" }];
  }

  /** The scope's directory under the root (hashed: scope ids never become path segments). */
  scopePath(scope: Input<"materialize">["scope"]): string {
    return join(this.#root, sha256Hex(runtimeScopeKey(scope)).slice(0, 32));
  }

  revisionPath(scope: Input<"materialize">["scope"], id: string): string {
    return join(this.scopePath(scope), "revisions", id);
  }

  async materialize(input: Input<"materialize">): Promise<WorkspaceMaterializeResult> {
    const { scope, candidate } = input;
    if (input.strategy !== "durable_mount") throw new Error(`workspace strategy ${input.strategy} is not offered`);
    const bindingId = `dmw_${sha256Hex(canonicalJson([runtimeScopeKey(scope), input.idempotencyKey])).slice(0, 32)}`;
    const binding: WorkspaceBinding = { bindingId, strategy: "durable_mount", mountPath: WORKSPACE_MOUNT_PATH };
    const target = this.#workPath({ ...input, binding });
    binding.metadata = { hostPath: target };
    // A retried key starts over from a fresh copy.
    await rm(target, { recursive: true, force: true });
    await mkdir(join(this.scopePath(scope), "work"), { recursive: true });
    if (candidate === null) {
      await mkdir(target);
      return { type: "materialized", binding, restored: null };
    }
    const reason = await this.#restore(input, target);
    if (reason === null) return { type: "materialized", binding, restored: candidate };
    await rm(target, { recursive: true, force: true });
    return { type: "candidate_rejected", candidate, reason };
  }

  /** The sandbox adapter bind-mounts `metadata.hostPath`; nothing to do after acquire. */
  async attach(): Promise<void> {}

  async checkpoint(input: Input<"checkpoint">): Promise<{ type: "created"; candidate: WorkspaceCandidateRef }> {
    const work = this.#workPath(input);
    const walked = await walkTree(work, { limits: this.#limits, symlinks: "record" });
    const problem = [...walked.issues, ...escapes(walked.entries)][0];
    if (problem) throw new Error(`workspace checkpoint failed (${problem.code}) /${problem.path}: ${problem.message}`);
    const staging = join(this.scopePath(input.scope), "staging", `${input.fence.generation}.${input.binding.bindingId}.${randomUUID()}`);
    try {
      await mkdir(join(staging, "tree"), { recursive: true });
      const entries: RevisionEntry[] = [];
      for (const entry of walked.entries) {
        try {
          entries.push(await freeze(walked.root, join(staging, "tree"), entry, this.#afterOpen));
        } catch (err) {
          const { code, path, message } = (err as { issue: Issue }).issue;
          throw new Error(`workspace checkpoint failed (${code}) /${path}: ${message}`);
        }
      }
      // Directories last, deepest first: their entries (files, links, subdirectories) are then on disk.
      for (const entry of [...entries].reverse()) if (entry.type === "dir") await syncPath(join(staging, "tree", entry.path));
      await syncPath(join(staging, "tree"));
      const manifest: RevisionManifest = { format: DURABLE_MOUNT_FORMAT, version: 1, entries };
      const bytes = Buffer.from(`${JSON.stringify(manifest)}\n`);
      const id = sha256Hex(bytes);
      const file = await open(join(staging, "manifest.json"), "wx");
      await file.writeFile(bytes);
      await file.sync();
      await file.close();
      await syncPath(staging);
      await this.#install(input.scope, id, staging);
      const files = entries.filter((e) => e.type === "file");
      const total = files.reduce((n, e) => n + e.size, 0);
      return {
        type: "created",
        candidate: { id, contentHash: `sha256:${id}`, metadata: { format: DURABLE_MOUNT_FORMAT, files: files.length, bytes: total } },
      };
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }

  async release(input: Input<"release">): Promise<void> {
    await rm(this.#workPath(input), { recursive: true, force: true });
  }

  async discard(input: Input<"discard">): Promise<{ type: "discarded" } | { type: "not_found" }> {
    if (!HEX64.test(input.candidate.id)) return { type: "not_found" };
    const path = this.revisionPath(input.scope, input.candidate.id);
    if (!(await exists(path))) return { type: "not_found" };
    await rm(path, { recursive: true, force: true });
    return { type: "discarded" };
  }

  /**
   * Garbage collection for one scope: working and staging trees of
   * generations older than `staleBefore` (the current fence generation: a
   * stale owner's tree is never published, so nothing needs it), and
   * revisions not in `retain` whose manifest is older than `olderThan` (a
   * revision the current owner just froze is not yet in the history).
   */
  async sweep(input: {
    scope: Input<"materialize">["scope"];
    staleBefore: number;
    retain: readonly string[];
    olderThan: number;
  }): Promise<{ trees: number; revisions: number }> {
    const base = this.scopePath(input.scope);
    let trees = 0;
    for (const area of ["work", "staging"]) {
      for (const name of await listDir(join(base, area))) {
        if (Number.parseInt(name, 10) >= input.staleBefore) continue;
        await rm(join(base, area, name), { recursive: true, force: true });
        trees++;
      }
    }
    let revisions = 0;
    const keep = new Set(input.retain);
    for (const id of await listDir(join(base, "revisions"))) {
      if (keep.has(id)) continue;
      const written = await stat(join(base, "revisions", id, "manifest.json")).then(
        (s) => s.mtimeMs,
        () => 0,
      );
      if (written >= input.olderThan) continue;
      await rm(join(base, "revisions", id), { recursive: true, force: true });
      revisions++;
    }
    return { trees, revisions };
  }

  #workPath(input: { scope: Input<"materialize">["scope"]; fence: { generation: number }; binding: WorkspaceBinding }): string {
    return join(this.scopePath(input.scope), "work", `${input.fence.generation}.${input.binding.bindingId}`);
  }

  /** Copies the revision into `target` and verifies the copy; a reason when the revision cannot be trusted. */
  async #restore(input: Input<"materialize">, target: string): Promise<string | null> {
    const candidate = input.candidate!;
    if (!HEX64.test(candidate.id) || candidate.contentHash !== `sha256:${candidate.id}`) {
      return "not a durable_mount revision (id and content hash differ)";
    }
    const loaded = await readManifest(this.revisionPath(input.scope, candidate.id), candidate.id);
    if (typeof loaded === "string") return loaded;
    try {
      await cp(join(this.revisionPath(input.scope, candidate.id), "tree"), target, {
        recursive: true,
        mode: constants.COPYFILE_FICLONE,
        verbatimSymlinks: true,
        errorOnExist: true,
        force: false,
      });
    } catch (err) {
      return `revision tree cannot be copied: ${(err as Error).message}`;
    }
    return verifyTree(target, loaded, this.#limits);
  }

  /** Renames the staged revision into place; an identical revision already there is kept if it still verifies. */
  async #install(scope: Input<"materialize">["scope"], id: string, staging: string): Promise<void> {
    const revisions = join(this.scopePath(scope), "revisions");
    const target = join(revisions, id);
    await mkdir(revisions, { recursive: true });
    if (await exists(target)) {
      const loaded = await readManifest(target, id);
      if (typeof loaded !== "string" && (await verifyTree(join(target, "tree"), loaded, this.#limits)) === null) return;
      // Same content id, damaged bytes: replace it with the fresh, verified copy.
      await rm(target, { recursive: true, force: true });
    }
    await rename(staging, target);
    await syncPath(revisions);
  }
}

/** Symlinks that resolve outside the workspace are refused, as `checkpoint_restore` does. */
function escapes(entries: readonly TreeEntry[]): Issue[] {
  const links = new Map<string, string>();
  for (const e of entries) if (e.type === "symlink") links.set(e.path, e.target);
  const out: Issue[] = [];
  for (const [path, target] of links) {
    if (!symlinkStaysInside(path, target, links)) {
      out.push({ code: "symlink_escape", path, message: `symlink target ${target} points outside the workspace` });
    }
  }
  return out;
}

/** Copies one walked entry into the staged tree; files through a verified descriptor, hashed as copied. */
async function freeze(
  root: string,
  tree: string,
  entry: TreeEntry,
  afterOpen: DurableMountWorkspaceOptions["afterOpen"],
): Promise<RevisionEntry> {
  const dest = join(tree, entry.path);
  if (entry.type === "dir") {
    await mkdir(dest);
    await chmod(dest, entry.mode);
    return { path: entry.path, type: "dir", mode: entry.mode };
  }
  if (entry.type === "symlink") {
    await symlink(entry.target, dest);
    return { path: entry.path, type: "symlink", target: entry.target };
  }
  return { path: entry.path, type: "file", mode: entry.mode, size: entry.size, sha256: await copyFile(root, entry, dest, afterOpen) };
}

async function copyFile(
  root: string,
  entry: FileEntry,
  dest: string,
  afterOpen: DurableMountWorkspaceOptions["afterOpen"],
): Promise<string> {
  const source = await openVerified(root, entry);
  const out = await open(dest, "wx", 0o600);
  try {
    await afterOpen?.(entry.path);
    const hash = createHash("sha256");
    const buf = Buffer.allocUnsafe(READ_BYTES);
    let total = 0;
    // One byte past the listed size is enough to see growth; a runaway writer is never followed.
    for (;;) {
      const { bytesRead } = await source.read(buf, 0, Math.min(READ_BYTES, entry.size + 1 - total), total);
      if (bytesRead === 0) break;
      hash.update(buf.subarray(0, bytesRead));
      await out.write(buf, 0, bytesRead);
      total += bytesRead;
      if (total > entry.size) break;
    }
    if (total !== entry.size || !sameStamp(entry.stamp, stampOf(await source.stat({ bigint: true })))) {
      throw issue("changed", entry.path, "file changed while the checkpoint copied it");
    }
    await out.chmod(entry.mode);
    await out.sync();
    return hash.digest("hex");
  } finally {
    await source.close();
    await out.close();
  }
}

/** The manifest, or why the revision is rejected. Its bytes must hash to the id the fence published. */
async function readManifest(revision: string, id: string): Promise<RevisionManifest | string> {
  const bytes = await readFile(join(revision, "manifest.json")).catch(() => null);
  if (bytes === null) return "revision manifest is missing";
  if (sha256Hex(bytes) !== id) return "revision manifest does not hash to the revision id";
  return JSON.parse(bytes.toString("utf8")) as RevisionManifest;
}

/** Checks a tree entry by entry against a manifest: same paths, types, modes, link targets and file bytes. */
async function verifyTree(dir: string, manifest: RevisionManifest, limits: CheckpointLimits): Promise<string | null> {
  const walked = await walkTree(dir, { limits, symlinks: "record" });
  if (walked.issues.length > 0) return `revision tree: ${walked.issues[0]!.code} /${walked.issues[0]!.path}`;
  const expected = new Map(manifest.entries.map((e) => [e.path, e]));
  if (walked.entries.length !== expected.size) return `revision tree has ${walked.entries.length} entries, manifest ${expected.size}`;
  for (const entry of walked.entries) {
    const want = expected.get(entry.path);
    const same =
      want?.type === entry.type &&
      (entry.type === "symlink"
        ? (want as { target: string }).target === entry.target
        : (want as { mode: number }).mode === entry.mode &&
          (entry.type === "dir" ||
            ((want as { size: number }).size === entry.size &&
              (await hashFile(walked.root, entry)) === (want as { sha256: string }).sha256)));
    if (!same) return `revision tree differs from its manifest at /${entry.path}`;
  }
  return null;
}

async function hashFile(root: string, entry: FileEntry): Promise<string> {
  const fh = await openVerified(root, entry);
  try {
    const hash = createHash("sha256");
    for await (const chunk of fh.createReadStream({ autoClose: false, start: 0 })) hash.update(chunk as Buffer);
    return hash.digest("hex");
  } finally {
    await fh.close();
  }
}

/** fsync of a file or directory: what makes a rename or a new entry survive power loss. */
async function syncPath(path: string): Promise<void> {
  const fh = await open(path, constants.O_RDONLY);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function listDir(path: string): Promise<string[]> {
  return readdir(path).catch(() => []);
}
