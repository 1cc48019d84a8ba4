/**
 * The stand-in's data-plane surfaces the driver does not use, driven by the
 * official SDK alone (routed as the driver routes it): the buffered REST
 * exec, the SSE exec stream, binary files both ways, and the platform's
 * auto-resume (a command on a paused sandbox is refused with 503, the SDK
 * activates, which resumes it, and retries). So a stand-in route cannot
 * drift from the SDK just because OpenMA's driver happens not to call it.
 */
import { type SuperserveStandIn, startSuperserveStandIn } from "@openma/standin-superserve";
import { Sandbox } from "@superserve/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSuperserveDriver, superserveConfigFromEnv } from "./index.ts";

describe("the official SDK's data-plane surfaces against the stand-in", () => {
  let standIn: SuperserveStandIn;
  let sandbox: Sandbox;
  beforeAll(async () => {
    standIn = await startSuperserveStandIn();
    const config = superserveConfigFromEnv(standIn.env);
    if ("missing" in config) throw new Error(config.missing.join(", "));
    // Creating a driver installs the data-plane route the SDK calls below go through.
    createSuperserveDriver(config);
    sandbox = await Sandbox.create({ apiKey: config.apiKey, baseUrl: config.baseUrl, name: "surfaces", envVars: { GREETING: "hi" } });
  });
  afterAll(async () => {
    await sandbox?.kill();
    expect(standIn.live()).toBe(0);
    await standIn?.close();
  });

  it("runs a buffered exec and a streamed one, with the sandbox's variables", async () => {
    expect(await sandbox.commands.run("echo $GREETING; echo oops >&2; exit 3")).toEqual({ stdout: "hi\n", stderr: "oops\n", exitCode: 3 });
    const seen: string[] = [];
    const streamed = await sandbox.commands.run("echo one; echo two", { onStdout: (text) => seen.push(text) });
    expect(streamed).toMatchObject({ stdout: "one\ntwo\n", exitCode: 0 });
    expect(seen.join("")).toBe("one\ntwo\n");
    expect(standIn.requests.some((r) => r.method === "POST" && r.path === "/exec/stream" && r.authorized)).toBe(true);
  });

  it("writes and reads bytes that are not text, making parent directories", async () => {
    const bytes = new Uint8Array([0, 255, 128, 10, 13, 0xc3]);
    await sandbox.files.write("/tmp/deep/er/blob.bin", bytes);
    expect(new Uint8Array(await sandbox.files.read("/tmp/deep/er/blob.bin"))).toEqual(bytes);
    await expect(sandbox.files.read("/tmp/deep/none")).rejects.toMatchObject({ statusCode: 404 });
  });

  it("resumes a paused sandbox on the next command, its processes and files kept", async () => {
    // `setsid -f`: the sleeper is in a session of its own before its pid is written, so the end of this command
    // (whose leftover processes the platform ends) cannot race its detaching.
    await sandbox.commands.run(
      "echo kept > /tmp/kept; setsid -f sh -c 'echo $$ > /tmp/sleep.pid; exec sleep 4242' >/dev/null 2>&1; while [ ! -s /tmp/sleep.pid ]; do sleep 0.01; done",
    );
    await sandbox.pause();
    expect(standIn.state(sandbox.id)).toBe("suspended");
    const from = standIn.requests.length;
    const after = await sandbox.commands.run('cat /tmp/kept; kill -0 "$(cat /tmp/sleep.pid)" && echo alive');
    expect(after).toMatchObject({ stdout: "kept\nalive\n", exitCode: 0 });
    expect(standIn.state(sandbox.id)).toBe("running");
    expect(standIn.requests.slice(from).map((r) => `${r.method} ${r.path}`)).toEqual([
      "POST /exec",
      `POST /sandboxes/${sandbox.id}/activate`,
      "POST /exec",
    ]);
  });
});
