/**
 * The runtime-host lane's session outputs become Files scoped to the session
 * (ADR 0023): after a run, the output manifest its fenced publication points
 * at is read (validated: it is stored bytes, not trusted), and each entry is
 * recorded like the serve lane's collected files. The bytes are copied from
 * the manifest's blob into the Files namespace as a stream (bounded buffers,
 * checked against the entry's size and digest), so deleting a File never
 * touches a blob the runtime's publications hold, and runtime GC never
 * removes one a File holds.
 */
import { type Logger, outputFilesOf, pruneOutputFiles, recordOutputFile } from "@openma/api";
import { sqlRuntimePorts } from "@openma/host";
import { type OutputEntry, outputManifestKey, parseOutputManifest } from "@openma/persistence";
import { discardStaged, openBlob, putStagedBlob, type Storage, stageBlob, stagingDirOf } from "@openma/storage";
import { oneAtATime } from "./session-outputs.ts";

export interface PublishedOutputsOptions {
  storage: Storage;
  ids: (prefix: string) => string;
  clock: { now(): number };
  logger: Logger;
  /** Staging directory for stores without one of their own. */
  fallbackStagingDir: string;
  bufferBytes: number;
}

export interface PublishedOutputs {
  /** Records the session's published outputs as its Files; calls for one session run one after the other. */
  importFor(scope: { environmentId: string; sessionId: string }): Promise<{ recorded: number; removed: number }>;
}

export function publishedOutputs(opts: PublishedOutputsOptions): PublishedOutputs {
  const { storage } = opts;
  const { fences } = sqlRuntimePorts(storage.db, { now: () => opts.clock.now() });

  const copy = async (entry: OutputEntry, key: string): Promise<void> => {
    const reader = await openBlob(storage.blobs, entry.blobKey);
    if (!reader) throw new Error(`output blob ${entry.blobKey} of ${entry.path} is missing`);
    const staged = await stageBlob(reader.body, {
      dir: stagingDirOf(storage.blobs, opts.fallbackStagingDir),
      maxBytes: entry.size,
      bufferBytes: opts.bufferBytes,
    });
    try {
      if (staged.sha256 !== entry.sha256 || staged.size !== entry.size)
        throw new Error(`output blob of ${entry.path} does not match its manifest`);
      await putStagedBlob(storage.blobs, key, staged);
    } finally {
      await discardStaged(staged);
    }
  };

  const run = async ({ environmentId, sessionId }: { environmentId: string; sessionId: string }) => {
    const active = await fences.active({ scope: { environmentId, sessionId }, signal: AbortSignal.timeout(30_000) });
    if (!active?.outputs) return { recorded: 0, removed: 0 };
    const bytes = await storage.blobs.get(outputManifestKey(active.outputs.id));
    const parsed = bytes ? parseOutputManifest(bytes) : ({ ok: false, message: "the manifest is missing" } as const);
    if (!parsed.ok) {
      opts.logger.warn({ session_id: sessionId, outputs: active.outputs.id, reason: parsed.message }, "published outputs not imported");
      return { recorded: 0, removed: 0 };
    }
    const known = await outputFilesOf(storage, sessionId);
    let recorded = 0;
    for (const entry of parsed.manifest.entries) {
      const before = known.get(entry.path)?.id;
      const row = await recordOutputFile(
        opts,
        sessionId,
        known,
        { path: entry.path, sha256: entry.sha256, size: entry.size, mimeType: entry.mimeType },
        (key) => copy(entry, key),
      );
      if (row.id !== before) recorded++;
    }
    const keep = new Set(parsed.manifest.entries.map((e) => e.path));
    const removed = await pruneOutputFiles(storage, known, keep);
    return { recorded, removed };
  };
  return { importFor: oneAtATime((scope) => scope.sessionId, run) };
}
