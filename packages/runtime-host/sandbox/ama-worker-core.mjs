// The in-sandbox half of the ama_worker lane, shared by its two entries:
// ama-worker.mjs (a local sandbox, the official SDK bound read-only at
// /openma/node_modules) and the single-file bundle a remote runtime receives
// (the SDK built in). Plain JavaScript for the node of the sandbox image.
//
// It reads ONE JSON line from stdin (the ANTHROPIC_* variables of an already
// claimed work item, the work secret among them), so no credential ever
// appears in argv, in the container's inspectable environment or in the
// environment the worker's tools inherit: the values go straight into
// `handleItem()` options. A local sandbox has no network: the control plane
// is reached through a unix socket bound in by the runtime host, exposed
// here as a loopback TCP port because the SDK speaks HTTP over TCP. A remote
// runtime reaches the control plane at its public URL (`apiUrl`).
import { createConnection, createServer } from "node:net";

function readFirstLine(stream, limit) {
  return new Promise((resolve, reject) => {
    let text = "";
    const onData = (chunk) => {
      text += chunk.toString("utf8");
      const end = text.indexOf("\n");
      if (end >= 0) {
        stream.off("data", onData);
        stream.pause();
        resolve(text.slice(0, end));
      } else if (text.length > limit) reject(new Error("launch message too long"));
    };
    stream.on("data", onData);
    stream.once("end", () => reject(new Error("stdin closed before the launch message")));
  });
}

function loopbackBridge(socketPath) {
  return new Promise((resolve, reject) => {
    const server = createServer((client) => {
      const upstream = createConnection(socketPath);
      client.pipe(upstream).pipe(client);
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on("error", close);
      upstream.on("error", close);
    });
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      server.unref();
      resolve(server.address().port);
    });
  });
}

async function main(loadSdk) {
  const launch = JSON.parse(await readFirstLine(process.stdin, 64 * 1024));
  const vars = launch.env ?? {};
  for (const name of ["ANTHROPIC_WORK_ID", "ANTHROPIC_ENVIRONMENT_ID", "ANTHROPIC_SESSION_ID", "ANTHROPIC_WORK_SECRET"]) {
    if (typeof vars[name] !== "string" || vars[name] === "") throw new Error(`launch message lacks ${name}`);
  }
  const baseURL = typeof launch.apiUrl === "string" ? launch.apiUrl : `http://127.0.0.1:${await loopbackBridge(launch.apiSocket)}`;
  const Anthropic = await loadSdk();
  // No standing credential: every call of this item authenticates with the sessions token inside the work secret.
  const client = new Anthropic({ baseURL, apiKey: null, authToken: null, maxRetries: 4 });
  const worker = client.beta.environments.work.worker({
    workdir: launch.workdir ?? "/workspace",
    ...(typeof launch.maxIdleMs === "number" ? { maxIdleMs: launch.maxIdleMs } : {}),
    ...(launch.memorySync === false ? { memorySyncIntervalMs: null } : {}),
  });
  if (launch.ack === true) {
    // A dispatched item (GKE dispatch, docs/dispatch.md) arrives unacknowledged: the worker takes it by
    // acknowledging it with the item's own sessions token, so the dispatcher never holds its lease.
    const secret = JSON.parse(Buffer.from(vars.ANTHROPIC_WORK_SECRET.replace(/-/g, "+").replace(/_/g, "/"), "base64").toString("utf8"));
    await client
      .withOptions({ authToken: secret.sessions_token })
      .beta.environments.work.ack(vars.ANTHROPIC_WORK_ID, { environment_id: vars.ANTHROPIC_ENVIRONMENT_ID });
  }
  const stop = new AbortController();
  process.once("SIGTERM", () => stop.abort());
  await worker.handleItem({
    workId: vars.ANTHROPIC_WORK_ID,
    environmentId: vars.ANTHROPIC_ENVIRONMENT_ID,
    sessionId: vars.ANTHROPIC_SESSION_ID,
    workSecret: vars.ANTHROPIC_WORK_SECRET,
    signal: stop.signal,
  });
}

/** Runs the worker for the one item of the launch message, then exits (0 when it finished the item). */
export function runWorker(loadSdk) {
  main(loadSdk).then(
    () => process.exit(0),
    (err) => {
      process.stderr.write(`ama-worker: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(1);
    },
  );
}
