/**
 * The README's two commands on a fresh machine: a container made from the
 * base sandbox image (Debian, no bubblewrap, no package lists) stands for a
 * machine that has just cloned the project and run `npm install`. `openma
 * serve` starts there on its embedded default, finds no usable sandbox,
 * installs bubblewrap itself (root, apt-get; progress on its terminal) and
 * runs the first cloud session's `bash` in a bubblewrap sandbox, without a
 * third command. The container shares the host's network (the scripted model
 * and the Debian mirror are reached from it) and may make namespaces (what
 * bubblewrap needs inside it). Completion is observed on the SSE stream and
 * in the server's output, never by waiting on time. Fails (never skips) when
 * the Docker Engine or the base image is missing.
 */
import { createServer } from "node:net";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import Anthropic from "@anthropic-ai/sdk";
import { connectDocker, imagePresent, probeEngine, readImageManifest } from "@openma/driver-node-docker";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import type Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resultText, toolTurnScript } from "../harness/local-sandbox-support.ts";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
const MODEL_KEY = "sk-scripted-first-start";
const API_KEY = "sk-ant-api03-first-start-admin-0123456789";
const LABEL = "openma.test.first-start";

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

/** Collects a container's output and resolves waits on lines as they arrive. */
class Output {
  text = "";
  #waiters: Array<{ pattern: RegExp; resolve: (match: RegExpMatchArray) => void }> = [];
  push(chunk: string) {
    this.text += chunk;
    this.#waiters = this.#waiters.filter((w) => {
      const match = this.text.match(w.pattern);
      if (match) w.resolve(match);
      return match === null;
    });
  }
  waitFor(pattern: RegExp, ended: Promise<void>): Promise<RegExpMatchArray> {
    const match = this.text.match(pattern);
    if (match) return Promise.resolve(match);
    return Promise.race([
      new Promise<RegExpMatchArray>((resolve) => this.#waiters.push({ pattern, resolve })),
      ended.then(() => {
        throw new Error(`the server exited before printing ${pattern}:\n${this.text}`);
      }),
    ]);
  }
}

describe("npm install && npm start on a fresh machine without bubblewrap", () => {
  let docker: Docker;
  let container: Docker.Container | undefined;
  let model: ScriptedModel;
  const output = new Output();
  let ended: Promise<void>;
  let port: number;

  beforeAll(async () => {
    docker = connectDocker();
    const engine = await probeEngine(docker);
    if (!engine.ok) throw new Error(engine.message);
    const manifest = await readImageManifest();
    if (!manifest.ok) throw new Error(manifest.message);
    const image = manifest.manifest.base.image;
    if (!(await imagePresent(docker, image))) throw new Error(`image ${image} is not loaded: run \`npm run provision\``);

    model = await startScriptedModel({ apiKey: MODEL_KEY, script: toolTurnScript("echo $$; hostname; command -v bwrap", "first\n") });
    port = await freePort();
    container = await docker.createContainer({
      Image: image,
      // What `npm start` runs, on the project's own Node 24 (the image has no npm).
      Cmd: [`${REPO_ROOT}/node_modules/.bin/node`, "--import", "tsx", `${REPO_ROOT}/apps/openma/src/cli.ts`, "serve"],
      WorkingDir: REPO_ROOT,
      Env: [
        `PORT=${port}`,
        "HOST=127.0.0.1",
        "OPENMA_DATA_DIR=/var/tmp/openma-data",
        `OPENMA_API_KEY=${API_KEY}`,
        `OPENMA_MODEL_BASE_URL=${model.url}`,
        `OPENMA_MODEL_API_KEY=${MODEL_KEY}`,
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      ],
      Labels: { [LABEL]: "1" },
      HostConfig: {
        NetworkMode: "host",
        Binds: [`${REPO_ROOT}:${REPO_ROOT}:ro`],
        // What bubblewrap needs to make its namespaces and mount /proc inside a container (not --privileged:
        // a nested guest may lack capabilities that flag asks for).
        CapAdd: ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"],
        SecurityOpt: ["seccomp=unconfined", "apparmor=unconfined"],
        MaskedPaths: [],
        ReadonlyPaths: [],
      },
    });
    const stream = await container.attach({ stream: true, stdout: true, stderr: true });
    // Not a TTY: stdout and stderr arrive multiplexed in 8-byte-headed frames.
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        output.push(chunk.toString("utf8"));
        done();
      },
    });
    docker.modem.demuxStream(stream, sink, sink);
    await container.start();
    ended = container.wait().then(() => {});
  }, 120_000);

  afterAll(async () => {
    await container?.remove({ force: true }).catch(() => {});
    await model?.close();
  });

  it("installs bubblewrap on the first start and runs the first session's bash in a sandbox", async () => {
    // The listener comes up first; the sandbox (after installing bubblewrap) right after.
    await output.waitFor(/OpenMA listening on http:\/\/127\.0\.0\.1:\d+/, ended);
    await output.waitFor(/sandbox tools run in per-session sandboxes/, ended);
    expect(output.text).toContain("installing bubblewrap for the embedded default");
    expect(output.text).toContain("provision: installing: bubblewrap");
    expect(output.text).toMatch(/"sandbox":"bubblewrap"/);

    const client = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: API_KEY, maxRetries: 0 });
    const env = await client.beta.environments.create({ name: "cloud" });
    const agent = await client.beta.agents.create({
      name: "first",
      model: "claude-test-1",
      tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_allow" } } }],
    });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const stream = await client.beta.sessions.events.stream(session.id);
    await client.beta.sessions.events.send(session.id, {
      events: [{ type: "user.message", content: [{ type: "text", text: "use the sandbox" }] }],
    });
    const events: Array<{ type: string; [k: string]: unknown }> = [];
    try {
      for await (const event of stream) {
        events.push(event as unknown as { type: string });
        if (event.type === "session.status_idle") break;
      }
    } finally {
      stream.controller.abort();
    }
    expect(events.filter((e) => e.type === "session.error")).toEqual([]);
    const results = events.filter((e) => e.type === "agent.tool_result");
    expect(results.map((r) => r.is_error)).toEqual([false, false, false]);
    const [pid, host, bwrap] = resultText(results[0] as never)
      .trim()
      .split("\n");
    // bash ran in the session's own pid namespace and hostname, and bwrap is now installed on the machine.
    expect(Number(pid)).toBeLessThan(20);
    expect(host).toBe("sandbox");
    expect(bwrap).toBe("/usr/bin/bwrap");
  });
});
