/**
 * Moving a tree between a host directory and a directory inside a remote
 * runtime through its ToolSandboxPort: one tar archive through the
 * provider's file API (binary-safe) and one `tar` command in the runtime.
 * A failure anywhere throws: the host turns it into the failed step
 * (attach, checkpoint, collect), never into a partial candidate.
 */
import { randomBytes } from "node:crypto";
import type { ExecResult, ToolSandboxPort } from "@openma/contract";
import { type ExtractLimits, emptyDirectory, extractInto, packDirectory } from "./tar.ts";

const TRANSFER_DIR = "/tmp/.openma/xfer";
const COMMAND_TIMEOUT_MS = 10 * 60_000;

/** `$1` archive, `$2` directory: unpack into the directory (made if missing), then delete the archive. */
const UNPACK = `f=$1; d=$2; mkdir -p -- "$d" && tar -xf "$f" -C "$d"; rc=$?; rm -f -- "$f"; exit $rc`;
/** `$1` archive, `$2` directory: pack the directory's contents (made if missing, so an empty one packs as empty). */
const PACK = `f=$1; d=$2; mkdir -p -- "$d" "\${f%/*}" && tar -cf "$f" -C "$d" .`;

function failure(what: string, result: ExecResult): Error {
  if (result.type === "exited")
    return new Error(`${what} exited ${result.exitCode}: ${Buffer.from(result.stderr).toString("utf8").trim().slice(-500)}`);
  return new Error(`${what}: ${result.type === "error" ? result.message : result.type}`);
}

/** Copies the contents of `hostDir` into `remoteDir` in the runtime. */
export async function pushTree(tools: ToolSandboxPort, hostDir: string, remoteDir: string, signal: AbortSignal): Promise<void> {
  const archive = await packDirectory(hostDir);
  const temp = `${TRANSFER_DIR}/${randomBytes(8).toString("hex")}.tar`;
  const wrote = await tools.writeFile({ path: temp, content: archive, signal });
  if (wrote.type !== "ok") throw new Error(`uploading ${remoteDir} into the runtime failed: ${wrote.message}`);
  const unpacked = await tools.exec({
    command: ["/bin/sh", "-c", UNPACK, "openma-unpack", temp, remoteDir],
    cwd: "/",
    timeoutMs: COMMAND_TIMEOUT_MS,
    signal,
  });
  if (unpacked.type !== "exited" || unpacked.exitCode !== 0) throw failure(`unpacking ${remoteDir} in the runtime`, unpacked);
}

/** Replaces the contents of `hostDir` with those of `remoteDir` in the runtime (hostile input: see `extractInto`). */
export async function pullTree(
  tools: ToolSandboxPort,
  remoteDir: string,
  hostDir: string,
  signal: AbortSignal,
  limits: ExtractLimits,
): Promise<void> {
  const temp = `${TRANSFER_DIR}/${randomBytes(8).toString("hex")}.tar`;
  try {
    const packed = await tools.exec({
      command: ["/bin/sh", "-c", PACK, "openma-pack", temp, remoteDir],
      cwd: "/",
      timeoutMs: COMMAND_TIMEOUT_MS,
      signal,
    });
    if (packed.type !== "exited" || packed.exitCode !== 0) throw failure(`packing ${remoteDir} in the runtime`, packed);
    const read = await tools.readFile({ path: temp, maxBytes: limits.maxBytes, signal });
    if (read.type !== "ok")
      throw new Error(`downloading ${remoteDir} from the runtime failed: ${read.type === "error" ? read.message : read.type}`);
    await emptyDirectory(hostDir);
    const extracted = await extractInto(read.content, hostDir, limits);
    if (!extracted.ok) throw new Error(`the archive of ${remoteDir} was refused: ${extracted.error}`);
  } finally {
    await tools
      .exec({ command: ["rm", "-f", "--", temp], cwd: "/", timeoutMs: 60_000, signal: AbortSignal.timeout(60_000) })
      .catch(() => {});
  }
}
