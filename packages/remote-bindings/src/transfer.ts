/**
 * Moving a tree between a host directory and a directory inside a remote
 * runtime through its ToolSandboxPort: one `tar` command each way, the
 * archive in base64 on its stdin or stdout. Base64 because several
 * providers deliver command output as text (E2B and Daytona decode it as
 * UTF-8); one command because each provider round trip costs. A failure
 * anywhere throws: the host turns it into the failed step (attach,
 * checkpoint, collect), never into a partial candidate.
 */
import type { ExecResult, ToolSandboxPort } from "@openma/contract";
import { type ExtractLimits, emptyDirectory, extractInto, packDirectory } from "./tar.ts";

const COMMAND_TIMEOUT_MS = 10 * 60_000;

/** `$1` directory: unpack the base64 archive on stdin into it (made if missing). */
const UNPACK = `d=$1; mkdir -p -- "$d" && base64 -d | tar -xf - -C "$d"`;
/** `$1` directory: its contents as a base64 archive on stdout (made if missing, so an empty one packs as empty). */
const PACK = `d=$1; mkdir -p -- "$d" && tar -cf - -C "$d" . | base64`;

function failure(what: string, result: ExecResult): Error {
  if (result.type === "exited")
    return new Error(`${what} exited ${result.exitCode}: ${Buffer.from(result.stderr).toString("utf8").trim().slice(-500)}`);
  return new Error(`${what}: ${result.type === "error" ? result.message : result.type}`);
}

/** Copies the contents of `hostDir` into `remoteDir` in the runtime. */
export async function pushTree(tools: ToolSandboxPort, hostDir: string, remoteDir: string, signal: AbortSignal): Promise<void> {
  const archive = await packDirectory(hostDir);
  const unpacked = await tools.exec({
    command: ["/bin/sh", "-c", UNPACK, "openma-unpack", remoteDir],
    cwd: "/",
    stdin: Buffer.from(`${archive.toString("base64")}\n`),
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
  // Base64 is 4/3 of the archive plus a newline every 76 characters.
  const maxOutputBytes = Math.ceil((limits.maxBytes * 4) / 3 / 76) * 77 + 64 * 1024;
  const packed = await tools.exec({
    command: ["/bin/sh", "-c", PACK, "openma-pack", remoteDir],
    cwd: "/",
    timeoutMs: COMMAND_TIMEOUT_MS,
    signal,
    maxOutputBytes,
  });
  if (packed.type !== "exited" || packed.exitCode !== 0) throw failure(`packing ${remoteDir} in the runtime`, packed);
  if (packed.truncated) throw new Error(`the archive of ${remoteDir} is larger than ${limits.maxBytes} bytes`);
  const text = Buffer.from(packed.stdout).toString("latin1");
  if (/[^A-Za-z0-9+/=\s]/.test(text)) throw new Error(`the archive of ${remoteDir} did not arrive as base64`);
  await emptyDirectory(hostDir);
  const extracted = await extractInto(Buffer.from(text, "base64"), hostDir, limits);
  if (!extracted.ok) throw new Error(`the archive of ${remoteDir} was refused: ${extracted.error}`);
}
