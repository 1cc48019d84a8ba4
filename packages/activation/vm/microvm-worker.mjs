// The in-VM worker of a launched MicroVM (acquire_then_session_poll): it
// serves exactly one session's Work and exits. Plain JavaScript, bundled
// with the official SDK into one file (src/vm-bundle.ts) that the MicroVM
// image carries.
//
// The run hook payload (session, environment, control plane URL) arrives on
// stdin. The environment key is not in it: the image
// carries it as a file (ENVIRONMENT_KEY_PATH), so it is never in argv, in
// this process's environment, or in the launch API's request.
//
// It polls the environment's Work with the environment key and takes only
// the item of its own session: that one it acks and hands to the official
// EnvironmentWorker's handleItem(), which heartbeats it, serves the session
// and force-stops it. Another session's item is left unacked, so the server
// offers it again (reclaim_older_than_ms) to the VM launched for it.

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import Anthropic from "@anthropic-ai/sdk";

const ENVIRONMENT_KEY_PATH = "/etc/openma/environment-key";
const RECLAIM_MS = 2000;
const POLL_BLOCK_MS = 999;
const GIVE_UP_MS = 10 * 60_000;

/** The run hook payload: all of stdin (the hook closes it after the payload), bounded. */
async function readPayload(limit) {
  let text = "";
  for await (const chunk of process.stdin) {
    text += chunk.toString("utf8");
    if (text.length > limit) throw new Error("run hook payload too long");
  }
  return JSON.parse(text);
}

function log(message) {
  process.stderr.write(`microvm-worker: ${message}\n`);
}

async function main() {
  const payload = await readPayload(32 * 1024);
  for (const name of ["environmentId", "sessionId", "apiUrl"]) {
    if (typeof payload[name] !== "string" || payload[name] === "") throw new Error(`run hook payload lacks ${name}`);
  }
  const environmentKey = readFileSync(ENVIRONMENT_KEY_PATH, "utf8").trim();
  const { environmentId, sessionId } = payload;
  const client = new Anthropic({ baseURL: payload.apiUrl, apiKey: null, authToken: environmentKey, maxRetries: 4 });
  const workerId = `microvm-${randomUUID()}`;
  const stop = new AbortController();
  process.once("SIGTERM", () => stop.abort());
  const giveUpAt = Date.now() + GIVE_UP_MS;
  log(`polling for the work of session ${sessionId}`);
  while (!stop.signal.aborted && Date.now() < giveUpAt) {
    const work = await client.beta.environments.work.poll(
      environmentId,
      { "Anthropic-Worker-ID": workerId, block_ms: POLL_BLOCK_MS, reclaim_older_than_ms: RECLAIM_MS },
      { signal: stop.signal },
    );
    if (work == null || work.data?.type !== "session" || work.data.id !== sessionId) continue;
    await client.beta.environments.work.ack(work.id, { environment_id: environmentId }, { signal: stop.signal });
    log(`claimed work ${work.id}`);
    const worker = client.beta.environments.work.worker({
      workdir: "/workspace",
      environmentId,
      environmentKey,
      ...(typeof payload.maxIdleMs === "number" ? { maxIdleMs: payload.maxIdleMs } : {}),
    });
    await worker.handleItem({ workId: work.id, environmentId, sessionId, workSecret: work.secret ?? undefined, signal: stop.signal });
    log(`work ${work.id} done`);
    return;
  }
  throw new Error(`no work for session ${sessionId} arrived`);
}

main().then(
  () => process.exit(0),
  (err) => {
    log(err instanceof Error ? err.message : String(err));
    process.exit(1);
  },
);
