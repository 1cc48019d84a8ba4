// The in-sandbox launcher of the ama_worker lane. Plain, dependency-free
// JavaScript: it runs on the node of the sandbox image, next to the
// official SDK bound read-only at /openma/node_modules.
//
// It reads ONE JSON line from stdin (the ANTHROPIC_* variables of an already
// claimed work item, the work secret among them), so no credential ever
// appears in argv, in the container's inspectable environment or in the
// environment the worker's tools inherit: the values go straight into
// `handleItem()` options. The sandbox has no network; the control plane is
// reached through a unix socket bound in by the runtime host, exposed here
// as a loopback TCP port because the SDK speaks HTTP over TCP.
import { createConnection, createServer } from "node:net";
import { pathToFileURL } from "node:url";

const SDK = "/openma/node_modules/@anthropic-ai/sdk/index.mjs";

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

async function main() {
  const launch = JSON.parse(await readFirstLine(process.stdin, 64 * 1024));
  const vars = launch.env ?? {};
  for (const name of ["ANTHROPIC_WORK_ID", "ANTHROPIC_ENVIRONMENT_ID", "ANTHROPIC_SESSION_ID", "ANTHROPIC_WORK_SECRET"]) {
    if (typeof vars[name] !== "string" || vars[name] === "") throw new Error(`launch message lacks ${name}`);
  }
  const port = await loopbackBridge(launch.apiSocket);
  const { default: Anthropic } = await import(pathToFileURL(SDK).href);
  // No standing credential: every call of this item authenticates with the sessions token inside the work secret.
  const client = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: null, authToken: null, maxRetries: 4 });
  const worker = client.beta.environments.work.worker({
    workdir: launch.workdir ?? "/workspace",
    ...(typeof launch.maxIdleMs === "number" ? { maxIdleMs: launch.maxIdleMs } : {}),
    ...(launch.memorySync === false ? { memorySyncIntervalMs: null } : {}),
  });
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

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`ama-worker: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
