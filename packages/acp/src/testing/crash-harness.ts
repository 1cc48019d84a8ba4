/**
 * One placement of an ACP harness in its own process, for crash tests that
 * kill it with SIGKILL: AcpSessionRunner (node ports) driving profile-agent.ts,
 * with the Session's API and the host's fenced commit played by files.
 *
 *   node --import tsx crash-harness.ts <dir> <stop>
 *
 * `<dir>/ws` is the workspace, `<dir>/eph` the ephemeral root. Published events
 * are appended to `<dir>/log.jsonl` (the canonical log); a workspace commit
 * copies the whole workspace to `<dir>/committed` through a scratch copy and a
 * rename (the host commits only whole candidates). Two turns run; `<stop>`
 * says where the second one parks until the process is killed:
 *   - `capture`: inside the capture's copy (a `cp` on PATH that copies, then
 *     blocks; `<dir>/bin/cp`, armed by `<dir>/armed`), before its rename;
 *   - `commit`: after the idle is published, before the workspace commit.
 * Parking is a read on a FIFO nobody writes; `<dir>/parked` says it got there.
 */
import { appendFileSync, existsSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { nodeSpawn, nodeStatePort } from "../node.ts";
import type { CanonicalEvent } from "../recovery-prompt.ts";
import { AcpSessionRunner } from "../session-runner.ts";

const [dir, stop] = process.argv.slice(2) as [string, "capture" | "commit"];
const logPath = `${dir}/log.jsonl`;
const history = (): CanonicalEvent[] =>
  existsSync(logPath)
    ? readFileSync(logPath, "utf8")
        .trim()
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as CanonicalEvent)
    : [];
const publish = (events: readonly object[]) => {
  for (const e of events) appendFileSync(logPath, `${JSON.stringify(e)}\n`);
};
const input = (id: string, text: string) => publish([{ id, type: "user.message", content: [{ type: "text", text }] }]);

async function park(): Promise<never> {
  writeFileSync(`${dir}/parked`, stop);
  // Opening a FIFO for reading blocks until a writer comes; none will.
  await open(`${dir}/park.fifo`, "r");
  throw new Error("unreachable: nobody writes the FIFO");
}

const runner = new AcpSessionRunner({
  sessionId: "sesn_crash",
  agent: {
    id: "codex",
    command: process.execPath,
    args: ["--no-warnings", fileURLToPath(new URL("./profile-agent.ts", import.meta.url))],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", PROFILE_AGENT_ID: "codex" },
  },
  spawn: nodeSpawn,
  state: nodeStatePort(),
  history: history(),
  workspaceRoot: `${dir}/ws`,
  ephemeralRoot: `${dir}/eph`,
  publish: async (events) => publish(events),
  commitWorkspace: async (turnId) => {
    if (stop === "commit" && turnId === "evt_2") await park();
    rmSync(`${dir}/committing`, { recursive: true, force: true });
    const copied = await nodeStatePort().exec(["cp", "-R", `${dir}/ws`, `${dir}/committing`]);
    if (copied.exitCode !== 0) throw new Error(copied.stderr);
    rmSync(`${dir}/committed`, { recursive: true, force: true });
    renameSync(`${dir}/committing`, `${dir}/committed`);
    appendFileSync(`${dir}/commits`, `${turnId}\n`);
  },
});

await runner.start();
input("evt_1", "one");
await runner.runTurn("evt_1", "one");
input("evt_2", "two");
// Only the second turn's capture parks (the workspace commit copies with cp too, so arm just before the turn).
if (stop === "capture") writeFileSync(`${dir}/armed`, "");
await runner.runTurn("evt_2", "two");
throw new Error("the second turn was meant to park");
