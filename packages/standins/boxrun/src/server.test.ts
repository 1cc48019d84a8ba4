/**
 * The BoxRun stand-in driven by the official REST client of
 * `@boxlite-ai/boxlite` (`JsBoxlite.rest`, its native transport unchanged):
 * box create/get/stop/start/remove, an execution with streamed output,
 * stdin and its end, the exit code, a kill, and tar file copies in and out,
 * all against a real local container. Fails, never skips, when dockerd or
 * the sandbox images are missing.
 */
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ApiKeyCredential, BoxliteRestOptions, JsBoxlite } from "@boxlite-ai/boxlite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BoxRunStandIn, startBoxRunStandIn } from "./server.ts";

/** Everything a stream yields until it ends. */
async function drain(stream: { next(): Promise<string | null> }): Promise<string> {
  let text = "";
  for (let chunk = await stream.next(); chunk !== null; chunk = await stream.next()) text += chunk;
  return text;
}

describe("the BoxRun stand-in under the official REST client", () => {
  let standIn: BoxRunStandIn;
  let dir: string;
  beforeAll(async () => {
    standIn = await startBoxRunStandIn();
    dir = await mkdtemp(join(tmpdir(), "openma-boxrun-"));
  });
  afterAll(async () => {
    await standIn?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("creates a box, runs commands with stdin, kills one, copies files, stops, starts and removes it", async () => {
    const runtime = JsBoxlite.rest(
      new BoxliteRestOptions({ url: standIn.url, credential: new ApiKeyCredential(standIn.env.BOXLITE_API_KEY as string) }),
    );
    const box = await runtime.create({ image: "standin", detach: true }, "suite-box");
    expect((await runtime.getInfo("suite-box"))?.state.status).toBe("running");

    const execution = await box.exec("/bin/sh", ["-c", "printf out1; printf err1 >&2; cat; exit 3"], null, false, null, null, "/");
    const stdin = await execution.stdin();
    const [stdout, stderr] = [drain(await execution.stdout()), drain(await execution.stderr())];
    await stdin.write(Buffer.from("hello\n"));
    await stdin.close();
    expect(await execution.wait()).toMatchObject({ exitCode: 3 });
    expect(await stdout).toBe("out1hello\n");
    expect(await stderr).toBe("err1");

    const sleeper = await box.exec("sleep", ["300"], null, false, null, null, null);
    await sleeper.kill();
    expect(await sleeper.wait()).toMatchObject({ exitCode: 137 });

    await writeFile(join(dir, "in.txt"), "copied");
    await box.copyIn(join(dir, "in.txt"), "/tmp/copied.txt");
    await box.copyOut("/tmp/copied.txt", join(dir, "out"));
    const out = (await stat(join(dir, "out"))).isDirectory() ? join(dir, "out", "copied.txt") : join(dir, "out");
    expect(await readFile(out, "utf8")).toBe("copied");

    await box.stop();
    expect(standIn.state(box.id)).toBe("suspended");
    await box.start();
    expect(standIn.state(box.id)).toBe("running");
    await runtime.remove("suite-box", true);
    expect(await runtime.getInfo("suite-box")).toBeNull();
    expect(standIn.live()).toBe(0);
    expect(await standIn.boxes.containers()).toEqual([]);
    // Every request carried the bearer the stand-in accepts.
    expect(standIn.requests.every((r) => r.authHeader === "authorization" && r.authorized)).toBe(true);
  });

  it("cuts an attach mid-output on demand; the official client reattaches and gets all of it", async () => {
    const runtime = JsBoxlite.rest(
      new BoxliteRestOptions({ url: standIn.url, credential: new ApiKeyCredential(standIn.env.BOXLITE_API_KEY as string) }),
    );
    const box = await runtime.create({ image: "standin", detach: true }, "cut-box");
    const fired = standIn.inject({ op: "exec", kind: "cut", afterBytes: 4 });
    const execution = await box.exec("/bin/sh", ["-c", "echo 0123456789; sleep 1; echo after"], null, false, null, null, "/");
    const stdout = drain(await execution.stdout());
    expect(await execution.wait()).toMatchObject({ exitCode: 0 });
    expect(await stdout).toBe("0123456789\nafter\n");
    await fired;
    const attaches = standIn.requests.filter((r) => r.method === "GET" && r.path.endsWith("/attach"));
    expect(attaches.length).toBeGreaterThanOrEqual(2);
    await runtime.remove("cut-box", true);
    expect(standIn.live()).toBe(0);
  });

  it("refuses a wrong key with the API's 401 envelope", async () => {
    const runtime = JsBoxlite.rest(new BoxliteRestOptions({ url: standIn.url, credential: new ApiKeyCredential("wrong-key") }));
    await expect(runtime.create({ image: "standin", detach: true }, "denied")).rejects.toThrow();
    expect(standIn.live()).toBe(0);
  });
});
