/**
 * First-start provisioning of the embedded default sandbox. `npm install &&
 * npm start` on a fresh machine has no bubblewrap, so sessions could not run a
 * single tool until someone ran `npm run provision` by hand. When no sandbox
 * driver is usable, `openma serve` installs bubblewrap itself through
 * `scripts/provision.sh --embedded` (the same idempotent install path as
 * `npm run provision`, without the Docker Engine), with its progress on the
 * terminal. It does so only as root with apt-get present, and never when
 * `OPENMA_AUTO_PROVISION=0`; otherwise the server starts with sandbox tools
 * failing closed, and the reason says why nothing was installed.
 */
import { spawn } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";

export type ProvisionOutcome = { type: "provisioned" } | { type: "not_attempted"; reason: string } | { type: "failed"; reason: string };

/** Installs what the embedded default needs; injected by tests. */
export type Provisioner = () => Promise<ProvisionOutcome>;

export const PROVISION_SCRIPT = join(import.meta.dirname, "../../../scripts/provision.sh");

export interface HostProvisionerOptions {
  /** Where the install's progress goes (the server's terminal). */
  output: NodeJS.WritableStream;
  uid?: number | undefined;
  path?: string | undefined;
  script?: string;
  /** Bounds a hung package manager (default 15 minutes). */
  timeoutMs?: number;
}

function onPath(command: string, path: string): boolean {
  return path.split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, command), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** Why this machine cannot be provisioned automatically, or null when it can. */
export function provisionRefusal(uid: number | undefined, path: string): string | null {
  if (uid !== 0) return "installing bubblewrap needs root; run `npm run provision` as root, or start the server as root once";
  if (!onPath("apt-get", path)) return "no apt-get on this machine; install bubblewrap with the system package manager";
  return null;
}

export function hostProvisioner(options: HostProvisionerOptions): Provisioner {
  const uid = "uid" in options ? options.uid : process.getuid?.();
  const path = options.path ?? process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin";
  return () => {
    const refusal = provisionRefusal(uid, path);
    if (refusal !== null) return Promise.resolve({ type: "not_attempted", reason: refusal });
    return new Promise((resolve) => {
      const child = spawn("bash", [options.script ?? PROVISION_SCRIPT, "--embedded"], {
        stdio: ["ignore", "pipe", "pipe"],
        timeout: options.timeoutMs ?? 15 * 60_000,
        env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
      });
      child.stdout.pipe(options.output, { end: false });
      child.stderr.pipe(options.output, { end: false });
      child.on("error", (err) =>
        resolve({ type: "failed", reason: `could not run ${options.script ?? PROVISION_SCRIPT}: ${err.message}` }),
      );
      child.on("close", (code, signal) => {
        if (code === 0) resolve({ type: "provisioned" });
        else resolve({ type: "failed", reason: `scripts/provision.sh --embedded exited with ${code ?? signal} (its output is above)` });
      });
    });
  };
}
