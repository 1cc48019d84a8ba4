/**
 * Node implementations of the two ports, for code already running where the
 * agent runs (the supervisor inside a sandbox, or a test on the host): the
 * state port over node:fs and execFile, the spawn port over child_process.
 */
import { execFile, spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { Readable, Writable } from "node:stream";
import type { AcpChildProcess, AcpSpawnInput } from "./agent-client.ts";
import type { AcpExecResult, AcpStatePort } from "./native-state.ts";

export function nodeStatePort(): AcpStatePort {
  return {
    writeFile: (path, content) => writeFile(path, content, { mode: 0o600 }),
    exec: (argv) =>
      new Promise<AcpExecResult>((resolve) => {
        const [file, ...args] = argv;
        if (!file) return resolve({ exitCode: 127, stdout: "", stderr: "empty argv" });
        execFile(file, args, { maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
          const code = error ? (typeof error.code === "number" ? error.code : 1) : 0;
          resolve({ exitCode: code, stdout: String(stdout), stderr: String(stderr) });
        });
      }),
  };
}

/**
 * Spawns an ACP child with exactly `env` (nothing inherited: control-plane
 * variables and credentials of the parent never leak into the agent).
 */
export const nodeSpawn = (input: AcpSpawnInput): AcpChildProcess => {
  const child = spawn(input.command, [...input.args], {
    cwd: input.cwd,
    env: { ...input.env },
    stdio: ["pipe", "pipe", "inherit"],
    detached: true,
  });
  const exited = new Promise<{ exitCode: number | null; signal: string | null }>((resolve) => {
    child.once("error", () => resolve({ exitCode: null, signal: null }));
    child.once("close", (exitCode, signal) => resolve({ exitCode, signal }));
  });
  // The agent may die before reading everything we wrote.
  child.stdin.on("error", () => {});
  const proc: AcpChildProcess = {
    stdin: Writable.toWeb(child.stdin) as WritableStream<Uint8Array>,
    stdout: Readable.toWeb(child.stdout) as ReadableStream<Uint8Array>,
    exited,
    kill: async () => {
      if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
      try {
        // The whole group: agents start helpers (shells, language servers).
        process.kill(-child.pid, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
    },
  };
  return proc;
};
