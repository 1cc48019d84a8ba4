/**
 * The server's container image (deploy/server/Dockerfile), built the way CI
 * and operators build it: `scripts/build-server-image.sh`, offline, from the
 * base sandbox image of `npm run provision` and this checkout. The
 * container starts on its embedded default (SQLite on its volume), passes
 * `/ready` (the probe its HEALTHCHECK and load balancers use), serves the
 * official SDK, and drains on `docker stop` (SIGTERM) with exit status 0.
 * Fails (never skips) when the Docker Engine or the base image is missing.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import Anthropic from "@anthropic-ai/sdk";
import { connectDocker } from "@openma/driver-node-docker";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "../support/ports.ts";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
const API_KEY = "sk-ant-api03-server-image-0123456789";
const docker = connectDocker();
const started: string[] = [];

afterAll(async () => {
  for (const id of started)
    await docker
      .getContainer(id)
      .remove({ force: true, v: true })
      .catch(() => {});
});

/** Polls `/ready` until it answers 200, or the container stops. */
async function ready(url: string, id: string): Promise<Record<string, unknown>> {
  for (;;) {
    const answer = await fetch(`${url}/ready`).catch(() => null);
    if (answer?.ok) return (await answer.json()) as Record<string, unknown>;
    const state = (await docker.getContainer(id).inspect()).State;
    if (!state.Running) throw new Error(`the server container exited (${state.ExitCode}) before it was ready`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

async function logs(id: string): Promise<string> {
  const raw = await docker.getContainer(id).logs({ stdout: true, stderr: true, follow: false });
  // Multiplexed frames: an 8-byte header before each chunk.
  const chunks: string[] = [];
  for (let at = 0; at + 8 <= raw.length; ) {
    const size = raw.readUInt32BE(at + 4);
    chunks.push(raw.subarray(at + 8, at + 8 + size).toString("utf8"));
    at += 8 + size;
  }
  return chunks.join("");
}

describe("the server container image", () => {
  it("builds offline, starts, passes /ready, serves the SDK and drains on SIGTERM", async () => {
    const built = await promisify(execFile)("bash", ["scripts/build-server-image.sh"], { cwd: REPO_ROOT, maxBuffer: 1 << 20 });
    const image = built.stdout.trim().split("\n").at(-1) ?? "";
    expect(image).toMatch(/^openma\/server:[0-9a-f]{16}$/);
    const labels = (await docker.getImage(image).inspect()).Config.Labels ?? {};
    expect(labels["openma.server.base"]).toMatch(/^openma\/sandbox-base:/);

    const port = await freePort();
    const container = await docker.createContainer({
      Image: image,
      // The operator's configuration: an admin key, and no sandbox engine inside this container.
      Env: [`PORT=${port}`, `OPENMA_API_KEY=${API_KEY}`, "OPENMA_SANDBOX=none"],
      HostConfig: { NetworkMode: "host" },
      Labels: { "openma.test.server-image": "1" },
    });
    started.push(container.id);
    await container.start();
    const url = `http://127.0.0.1:${port}`;
    expect(await ready(url, container.id)).toMatchObject({ status: "ready", checks: { database: "ok", blobs: "ok" } });

    const info = await container.inspect();
    expect(info.Config.User).toBe("1000:1000");
    const client = new Anthropic({ baseURL: url, apiKey: API_KEY, maxRetries: 0 });
    const agent = await client.beta.agents.create({ name: "in a container", model: "claude-test-1" });
    expect((await client.beta.agents.retrieve(agent.id)).name).toBe("in a container");

    await container.stop({ t: 30 });
    const stopped = await container.inspect();
    expect(stopped.State.ExitCode).toBe(0);
    const output = await logs(container.id);
    expect(output).toContain("draining");
    expect(output).not.toContain(API_KEY);
  }, 600_000);
});
