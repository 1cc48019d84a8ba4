/**
 * Cloud driver selection: the configuration names (OPENMA_SANDBOX, its
 * SANDBOX_PROVIDER alias, the runtime host's fallback), the doctor's checks
 * (missing variables, then one real listing through the SDK), serve's
 * per-session sandboxes on a cloud driver, and `openma standin` — against
 * the Sprites stand-in (real local containers behind it), and the doctor
 * against the Blaxel and Vercel stand-ins.
 */
import { silentLogger } from "@openma/api";
import type { CloudStandIn } from "@openma/standin-kit";
import type { SpritesStandIn } from "@openma/standin-sprites";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "./config.ts";
import { checkRemoteSandboxes, missingVariables, openRemoteServeSandboxes } from "./remote-sandboxes.ts";
import { describeStandIn, startStandIn } from "./standin.ts";

describe("configuration", () => {
  it("selects a cloud driver for serve and, by default, for the runtime host", () => {
    const host = { OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: "env_1", ANTHROPIC_ENVIRONMENT_KEY: "envkey-123456" };
    const config = loadConfig({ OPENMA_SANDBOX: "e2b", ...host });
    expect(config.brain.sandbox).toBe("e2b");
    expect(config.runtimeHost?.sandbox).toBe("e2b");
    expect(loadConfig({ SANDBOX_PROVIDER: "daytona", ...host }).brain.sandbox).toBe("daytona");
    expect(loadConfig({ OPENMA_SANDBOX: "sprites", OPENMA_RUNTIME_HOST_SANDBOX: "docker", ...host }).runtimeHost?.sandbox).toBe("docker");
    // A local choice for serve leaves the runtime host on its own default.
    expect(loadConfig({ OPENMA_SANDBOX: "docker", ...host }).runtimeHost?.sandbox).toBe("auto");
    expect(() => loadConfig({ OPENMA_SANDBOX: "gke-agent-sandbox" })).toThrow(/OPENMA_SANDBOX/);
  });

  it("names the variables a driver lacks", () => {
    expect(missingVariables("e2b", {})).toEqual(["E2B_API_KEY"]);
    expect(missingVariables("sprites", { SPRITE_TOKEN: "t" })).toEqual([]);
    expect(missingVariables("sprites", {})).toEqual(["SPRITES_TOKEN or SPRITE_TOKEN"]);
    expect(missingVariables("blaxel", { BL_API_KEY: "k" })).toEqual(["BL_WORKSPACE"]);
    expect(loadConfig({ OPENMA_SANDBOX: "blaxel" }).brain.sandbox).toBe("blaxel");
    expect(missingVariables("modal", { MODAL_TOKEN_ID: "ak-x" })).toEqual(["MODAL_TOKEN_SECRET"]);
    expect(loadConfig({ OPENMA_SANDBOX: "modal" }).brain.sandbox).toBe("modal");
  });
});

describe("against the Sprites stand-in", () => {
  let standIn: SpritesStandIn;
  beforeAll(async () => {
    standIn = (await startStandIn("sprites", { PORT: "0" })) as SpritesStandIn;
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("prints what to export to point OpenMA at the stand-in", () => {
    const text = describeStandIn(standIn);
    expect(text).toContain("export OPENMA_SANDBOX=sprites");
    expect(text).toContain(`export SPRITES_API_URL=${standIn.url}`);
  });

  it("doctor: a selected driver without credentials is missing; with them it is reached through the SDK", async () => {
    expect(await checkRemoteSandboxes({}, 5_000)).toEqual([]);
    const missing = await checkRemoteSandboxes({ OPENMA_SANDBOX: "sprites" }, 5_000);
    expect(missing).toMatchObject([{ id: "sandbox:sprites", status: "missing", disables: ["OPENMA_SANDBOX=sprites"] }]);
    const reached = await checkRemoteSandboxes({ OPENMA_SANDBOX: "sprites", ...standIn.env }, 5_000);
    expect(reached).toMatchObject([{ id: "sandbox:sprites", status: "ok", facts: { owned: 0 } }]);
    const wrong = await checkRemoteSandboxes({ ...standIn.env, SPRITES_TOKEN: "wrong-token" }, 5_000);
    expect(wrong).toMatchObject([{ id: "sandbox:sprites", status: "warn" }]);
    expect(standIn.requests.some((r) => !r.authorized)).toBe(true);
  });

  it("serve's sandbox tools run in a per-session Sprite, which release removes", async () => {
    const sandboxes = await openRemoteServeSandboxes("sprites", standIn.env, { dataDir: "/nonexistent-unused", logger: silentLogger });
    try {
      expect(sandboxes.driver).toBe("sprites");
      const request = {
        sessionId: "sesn_serve_cloud",
        environmentId: "env_serve_cloud",
        environment: null,
        signal: AbortSignal.timeout(60_000),
      };
      const resolved = await sandboxes.resolve(request);
      if (resolved.type !== "ready") throw new Error(resolved.reason);
      const ran = await resolved.port.exec({
        command: ["sh", "-c", "echo hi > /workspace/hi.txt && cat /workspace/hi.txt"],
        timeoutMs: 60_000,
        signal: request.signal,
      });
      expect(ran.type === "exited" && Buffer.from(ran.stdout).toString()).toBe("hi\n");
      expect(standIn.live()).toBe(1);
      // The same session gets the same sandbox back.
      const again = await sandboxes.resolve(request);
      expect(again.type === "ready" && again.port.workdir).toBe("/workspace");
      expect(standIn.live()).toBe(1);
      await sandboxes.release("sesn_serve_cloud");
      expect(standIn.live()).toBe(0);
    } finally {
      await sandboxes.close();
    }
  });
});

describe("against the Blaxel stand-in", () => {
  let standIn: CloudStandIn;
  beforeAll(async () => {
    standIn = (await startStandIn("blaxel", { PORT: "0" })) as CloudStandIn;
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("doctor reaches it through @blaxel/core, and says so when the key is wrong", async () => {
    expect(describeStandIn(standIn)).toContain(`export BL_API_URL=${standIn.url}/v0`);
    const reached = await checkRemoteSandboxes({ OPENMA_SANDBOX: "blaxel", ...standIn.env }, 5_000);
    expect(reached).toMatchObject([{ id: "sandbox:blaxel", status: "ok", facts: { owned: 0 } }]);
    const wrong = await checkRemoteSandboxes({ ...standIn.env, BL_API_KEY: "wrong-key" }, 5_000);
    expect(wrong).toMatchObject([{ id: "sandbox:blaxel", status: "warn" }]);
  });
});

describe("the vercel driver's configuration", () => {
  it("takes an access token with its team and project, or an OIDC token that names both", async () => {
    const { vercelConfigFromEnv } = await import("@openma/driver-vercel");
    expect(missingVariables("vercel", {})).toEqual(["VERCEL_TOKEN or VERCEL_OIDC_TOKEN"]);
    expect(vercelConfigFromEnv({ VERCEL_TOKEN: "t" })).toEqual({ missing: ["VERCEL_TEAM_ID", "VERCEL_PROJECT_ID"] });
    const claims = Buffer.from(JSON.stringify({ owner_id: "team_oidc", project_id: "prj_oidc" })).toString("base64url");
    expect(vercelConfigFromEnv({ VERCEL_OIDC_TOKEN: `h.${claims}.s` })).toMatchObject({
      token: `h.${claims}.s`,
      teamId: "team_oidc",
      projectId: "prj_oidc",
    });
    expect(() => vercelConfigFromEnv({ VERCEL_OIDC_TOKEN: "not-a-jwt" })).toThrow(/not a Vercel OIDC token/);
    expect(() => vercelConfigFromEnv({ VERCEL_TOKEN: "t", OPENMA_VERCEL_SESSION_TIMEOUT_MS: "5" })).toThrow(/at least 60000/);
    expect(loadConfig({ SANDBOX_PROVIDER: "vercel" }).brain.sandbox).toBe("vercel");
  });
});

describe("against the Vercel stand-in", () => {
  let standIn: CloudStandIn;
  beforeAll(async () => {
    standIn = (await startStandIn("vercel", { PORT: "0" })) as CloudStandIn;
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("doctor reaches it through @vercel/sandbox (routed by its per-call fetch), and says so when the token is wrong", async () => {
    expect(describeStandIn(standIn)).toContain(`export OPENMA_VERCEL_API_URL=${standIn.url}/api`);
    const missing = await checkRemoteSandboxes({ OPENMA_SANDBOX: "vercel" }, 5_000);
    expect(missing).toMatchObject([{ id: "sandbox:vercel", status: "missing" }]);
    const reached = await checkRemoteSandboxes({ OPENMA_SANDBOX: "vercel", ...standIn.env }, 5_000);
    expect(reached).toMatchObject([{ id: "sandbox:vercel", status: "ok", facts: { owned: 0 } }]);
    const wrong = await checkRemoteSandboxes({ ...standIn.env, VERCEL_TOKEN: "wrong-token" }, 5_000);
    expect(wrong).toMatchObject([{ id: "sandbox:vercel", status: "warn" }]);
  });
});

describe("against the Modal stand-in", () => {
  let standIn: CloudStandIn;
  beforeAll(async () => {
    standIn = (await startStandIn("modal", { PORT: "0" })) as CloudStandIn;
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("doctor reaches it through the modal SDK over gRPC, and says so when the token is wrong", async () => {
    expect(describeStandIn(standIn)).toContain(`export MODAL_SERVER_URL=${standIn.env.MODAL_SERVER_URL}`);
    const reached = await checkRemoteSandboxes({ OPENMA_SANDBOX: "modal", ...standIn.env }, 5_000);
    expect(reached).toMatchObject([{ id: "sandbox:modal", status: "ok", facts: { owned: 0 } }]);
    const wrong = await checkRemoteSandboxes({ ...standIn.env, MODAL_TOKEN_SECRET: "as-wrong" }, 5_000);
    expect(wrong).toMatchObject([{ id: "sandbox:modal", status: "warn" }]);
    const missing = await checkRemoteSandboxes({ OPENMA_SANDBOX: "modal", MODAL_TOKEN_ID: "ak-x" }, 5_000);
    expect(missing).toMatchObject([{ id: "sandbox:modal", status: "missing", detail: "Modal: MODAL_TOKEN_SECRET not set" }]);
  });
});

describe("against the Superserve stand-in", () => {
  let standIn: CloudStandIn;
  beforeAll(async () => {
    standIn = (await startStandIn("superserve", { PORT: "0" })) as CloudStandIn;
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("doctor reaches it through @superserve/sdk, and says so when the key is wrong", async () => {
    const text = describeStandIn(standIn);
    expect(text).toContain(`export SUPERSERVE_BASE_URL=${standIn.url}`);
    expect(text).toContain(`export OPENMA_SUPERSERVE_DATA_PLANE_URL=${standIn.env.OPENMA_SUPERSERVE_DATA_PLANE_URL}`);
    const reached = await checkRemoteSandboxes({ OPENMA_SANDBOX: "superserve", ...standIn.env }, 5_000);
    expect(reached).toMatchObject([{ id: "sandbox:superserve", status: "ok", facts: { owned: 0 } }]);
    const wrong = await checkRemoteSandboxes({ ...standIn.env, SUPERSERVE_API_KEY: "ss-wrong" }, 5_000);
    expect(wrong).toMatchObject([{ id: "sandbox:superserve", status: "warn" }]);
    const missing = await checkRemoteSandboxes({ OPENMA_SANDBOX: "superserve" }, 5_000);
    expect(missing).toMatchObject([{ id: "sandbox:superserve", status: "missing", detail: "Superserve: SUPERSERVE_API_KEY not set" }]);
  });
});

describe("the cloudflare-bridge driver against its stand-in", () => {
  let standIn: CloudStandIn;
  beforeAll(async () => {
    standIn = (await startStandIn("cloudflare-bridge", { PORT: "0" })) as CloudStandIn;
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("is configured by CLOUDFLARE_BRIDGE_URL and SANDBOX_API_KEY, and doctor reaches the bridge or says the key is wrong", async () => {
    expect(missingVariables("cloudflare-bridge", {})).toEqual(["CLOUDFLARE_BRIDGE_URL", "SANDBOX_API_KEY"]);
    expect(loadConfig({ OPENMA_SANDBOX: "cloudflare-bridge" }).brain.sandbox).toBe("cloudflare-bridge");
    expect(describeStandIn(standIn)).toContain(`export CLOUDFLARE_BRIDGE_URL=${standIn.url}`);
    const reached = await checkRemoteSandboxes({ OPENMA_SANDBOX: "cloudflare-bridge", ...standIn.env }, 5_000);
    expect(reached).toMatchObject([{ id: "sandbox:cloudflare-bridge", status: "ok", facts: { owned: 0 } }]);
    const wrong = await checkRemoteSandboxes({ ...standIn.env, SANDBOX_API_KEY: "wrong-key" }, 5_000);
    expect(wrong).toMatchObject([{ id: "sandbox:cloudflare-bridge", status: "warn" }]);
    expect(standIn.live()).toBe(0);
  });
});

describe("the cloudflare driver against the bridge stand-in with our Worker's egress route", () => {
  let standIn: CloudStandIn;
  beforeAll(async () => {
    standIn = (await startStandIn("cloudflare", { PORT: "0" })) as CloudStandIn;
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("is configured by CLOUDFLARE_WORKER_URL and SANDBOX_API_KEY, and doctor reaches the Worker or says the key is wrong", async () => {
    expect(missingVariables("cloudflare", {})).toEqual(["CLOUDFLARE_WORKER_URL", "SANDBOX_API_KEY"]);
    expect(loadConfig({ OPENMA_SANDBOX: "cloudflare" }).brain.sandbox).toBe("cloudflare");
    expect(describeStandIn(standIn)).toContain(`export CLOUDFLARE_WORKER_URL=${standIn.url}`);
    // The shared SANDBOX_API_KEY alone does not make doctor check the other Cloudflare driver.
    const reached = await checkRemoteSandboxes({ OPENMA_SANDBOX: "cloudflare", ...standIn.env }, 5_000);
    expect(reached).toMatchObject([{ id: "sandbox:cloudflare", status: "ok", facts: { owned: 0 } }]);
    const wrong = await checkRemoteSandboxes({ ...standIn.env, SANDBOX_API_KEY: "wrong-key" }, 5_000);
    expect(wrong).toMatchObject([{ id: "sandbox:cloudflare", status: "warn" }]);
    expect(standIn.live()).toBe(0);
  });
});
