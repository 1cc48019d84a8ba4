/**
 * The serve lane's session outputs become Files scoped to the session (ADR
 * 0023): `<dataDir>/outputs/<session id>` (bound at /mnt/session/outputs) is
 * collected when a turn ends and once more when the session is archived.
 *
 * The directory belongs to a sandbox we do not trust: the walk (persistence's
 * hostile-tree walker) never follows a symlink, refuses FIFOs, sockets and
 * devices, bounds entry counts, file and total sizes; each file is opened
 * with O_NOFOLLOW and proven to be the inode the walk saw at the place it saw
 * it, streamed into the blob store's staging area (bounded buffers, hashed on
 * the way, never more than the listed size), and checked unchanged after the
 * read. Refused files are logged with their reason and keep whatever row they
 * had; a file unchanged since the last collection (same stamp) is not read again.
 */
import { createHash } from "node:crypto";
import type { FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { type Logger, outputFilesOf, pruneOutputFiles, recordOutputFile } from "@openma/api";
import type { TurnRunner } from "@openma/execution";
import {
  DEFAULT_OUTPUT_LIMITS,
  describeChange,
  type FileStamp,
  guessMimeType,
  type Issue,
  IssueError,
  listOutputs,
  type OutputLimits,
  openVerified,
  RACY_WINDOW_MS,
  sameStamp,
  stampOf,
  type TreeEntry,
} from "@openma/persistence";
import { discardStaged, putStagedBlob, type StagedBlob, type Storage, stageBlob, stagingDirOf } from "@openma/storage";

type FileEntry = Extract<TreeEntry, { type: "file" }>;

export interface SessionOutputsOptions {
  storage: Storage;
  dataDir: string;
  ids: (prefix: string) => string;
  clock: { now(): number };
  logger: Logger;
  /** Per-file, total and count caps (default: persistence's output limits, files capped at the upload limit). */
  limits?: Partial<OutputLimits>;
  /** Buffer of each stream stage while a file is read (the transfer buffer). */
  bufferBytes: number;
}

export interface CollectReport {
  recorded: number;
  unchanged: number;
  removed: number;
  refused: Issue[];
}

export interface SessionOutputs {
  /** Collects the session's outputs now; concurrent calls for one session run one after the other. */
  collect(sessionId: string): Promise<CollectReport>;
}

/** A local sandbox's session directories (sandbox.ts binds them at /mnt/session/outputs and /workspace). */
export function outputsDirOf(dataDir: string, sessionId: string): string {
  return join(dataDir, "outputs", sessionId);
}

export function workspaceDirOf(dataDir: string, sessionId: string): string {
  return join(dataDir, "workspaces", sessionId);
}

export function sessionOutputs(opts: SessionOutputsOptions): SessionOutputs {
  const limits: OutputLimits = { ...DEFAULT_OUTPUT_LIMITS, ...opts.limits };
  // What each path held when it was last read: an unchanged stamp needs no second read.
  const seen = new Map<string, Map<string, { stamp: FileStamp; sha256: string }>>();

  const run = async (sessionId: string): Promise<CollectReport> => {
    const report: CollectReport = { recorded: 0, unchanged: 0, removed: 0, refused: [] };
    const session = await opts.storage.db.selectFrom("sessions").select("id").where("id", "=", sessionId).executeTakeFirst();
    // A deleted session has no outputs to show (and its id must not collect rows again).
    if (!session) return report;
    let listed: Awaited<ReturnType<typeof listOutputs>>;
    try {
      listed = await listOutputs(outputsDirOf(opts.dataDir, sessionId), limits);
    } catch (err) {
      // No outputs directory: the session never had a sandbox here.
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return report;
      throw err;
    }
    report.refused.push(...listed.issues);
    const known = await outputFilesOf(opts.storage, sessionId);
    const stamps = seen.get(sessionId) ?? new Map();
    seen.set(sessionId, stamps);
    // A refused path keeps the row it had (a file mid-write is not a deleted one).
    const keep = new Set(listed.issues.map((i) => i.path));
    for (const file of listed.files) {
      keep.add(file.path);
      const before = stamps.get(file.path);
      const row = known.get(file.path);
      if (before && row && row.sha256 === before.sha256 && sameStamp(before.stamp, file.stamp)) {
        report.unchanged++;
        continue;
      }
      try {
        const staged = await stageVerified(
          listed.root,
          file,
          stagingDirOf(opts.storage.blobs, join(opts.dataDir, "uploads")),
          opts.bufferBytes,
        );
        try {
          const recorded = await recordOutputFile(
            opts,
            sessionId,
            known,
            { path: file.path, sha256: staged.sha256, size: staged.size, mimeType: staged.mimeType },
            (key) => putStagedBlob(opts.storage.blobs, key, staged),
          );
          if (recorded.id === row?.id) report.unchanged++;
          else report.recorded++;
          stamps.set(file.path, { stamp: file.stamp, sha256: staged.sha256 });
        } finally {
          await discardStaged(staged);
        }
      } catch (err) {
        if (!(err instanceof IssueError)) throw err;
        report.refused.push(err.issue);
      }
    }
    // A truncated walk did not see every path: removing the unseen ones would drop live outputs.
    if (!listed.issues.some((i) => i.code === "too_many_entries" || i.code === "total_too_large")) {
      report.removed = await pruneOutputFiles(opts.storage, known, keep);
    }
    for (const path of stamps.keys()) if (!known.has(path)) stamps.delete(path);
    if (report.refused.length > 0) {
      opts.logger.warn({ session_id: sessionId, refused: report.refused.slice(0, 20) }, "session outputs left out of the session's files");
    }
    return report;
  };

  return { collect: oneAtATime((sessionId: string) => sessionId, run) };
}

/** `run` with calls of the same key (a session) queued behind each other (a failed one does not block the next). */
export function oneAtATime<A, T>(keyOf: (arg: A) => string, run: (arg: A) => Promise<T>): (arg: A) => Promise<T> {
  const chains = new Map<string, Promise<unknown>>();
  return (arg) => {
    const key = keyOf(arg);
    const previous = chains.get(key) ?? Promise.resolve();
    const next = previous.catch(() => undefined).then(() => run(arg));
    chains.set(key, next);
    void next
      .finally(() => {
        if (chains.get(key) === next) chains.delete(key);
      })
      .catch(() => undefined);
    return next;
  };
}

/** The runner with the session's outputs collected after each turn (a failed collection is logged, never the turn's). */
export function collectingRunner(runner: TurnRunner, outputs: SessionOutputs, logger: Logger): TurnRunner {
  return {
    needsTurn: (sessionId) => runner.needsTurn(sessionId),
    giveUp: (sessionId, input) => runner.giveUp(sessionId, input),
    async runTurn(sessionId, signal) {
      const outcome = await runner.runTurn(sessionId, signal);
      await outputs.collect(sessionId).catch((err: unknown) => {
        logger.warn({ session_id: sessionId, err: err instanceof Error ? err.message : String(err) }, "collecting session outputs failed");
      });
      return outcome;
    },
  };
}

/**
 * Streams one walked file into the staging area: never more than its listed
 * size, then proves nothing changed while it was read (stamps; a file touched
 * within the racy window is hashed a second time, as stamps cannot see a
 * same-size rewrite within one timestamp tick).
 */
async function stageVerified(root: string, file: FileEntry, dir: string, bufferBytes: number): Promise<StagedBlob & { mimeType: string }> {
  const fh = await openVerified(root, file);
  let staged: StagedBlob | undefined;
  try {
    const head = Buffer.alloc(Math.min(file.size, 8192));
    await fh.read(head, 0, head.length, 0);
    staged = await stageBlob(readRange(fh, file.size, bufferBytes), { dir, maxBytes: file.size, bufferBytes });
    const after = stampOf(await fh.stat({ bigint: true }));
    if (!sameStamp(file.stamp, after)) throw changed(file.path, describeChange(file.stamp, after));
    if (staged.size !== file.size) throw changed(file.path, `read ${staged.size} of ${file.size} bytes`);
    const recent = file.stamp.ctimeNs >= BigInt(Date.now() - RACY_WINDOW_MS) * 1_000_000n;
    if (recent && (await hashOf(readRange(fh, file.size, bufferBytes))) !== staged.sha256) {
      throw changed(file.path, "file content changed while being read");
    }
    return { ...staged, mimeType: guessMimeType(file.path, head) };
  } catch (err) {
    if (staged) await discardStaged(staged);
    if (err instanceof IssueError) throw err;
    // The file grew past its listed size while being read.
    throw changed(file.path, err instanceof Error ? err.message : String(err));
  } finally {
    await fh.close();
  }
}

function changed(path: string, message: string): IssueError {
  return new IssueError({ code: "changed", path, message });
}

/** The first `size` bytes of the open file, as a stream that leaves the descriptor open. */
function readRange(fh: FileHandle, size: number, bufferBytes: number): Readable {
  if (size === 0) return Readable.from([]);
  return fh.createReadStream({ start: 0, end: size - 1, autoClose: false, highWaterMark: bufferBytes });
}

async function hashOf(source: Readable): Promise<string> {
  const hash = createHash("sha256");
  await pipeline(source, async (chunks: AsyncIterable<Uint8Array>) => {
    for await (const chunk of chunks) hash.update(chunk);
  });
  return hash.digest("hex");
}
