/**
 * `openma doctor` and `openma standin <vendor>` for the E2B, Daytona and
 * BoxRun drivers (Sprites and Blaxel are in
 * apps/openma/src/remote-sandboxes.test.ts): the stand-in prints the
 * variables that point the driver at it; a selected driver without them is
 * `missing` and names them; with them it is reached through the vendor's
 * SDK (one real listing); with a wrong credential the provider's refusal
 * is a warning. The seed's `SANDBOX_PROVIDER` selects the same check.
 */
import type { CloudStandIn } from "@openma/standin-kit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../apps/openma/src/config.ts";
import { checkRemoteSandboxes, missingVariables } from "../../apps/openma/src/remote-sandboxes.ts";
import { describeStandIn, startStandIn } from "../../apps/openma/src/standin.ts";

const CASES = [
  { vendor: "e2b", missing: ["E2B_API_KEY"], credential: "E2B_API_KEY" },
  { vendor: "daytona", missing: ["DAYTONA_API_KEY"], credential: "DAYTONA_API_KEY" },
  { vendor: "boxrun", missing: ["BOXLITE_REST_URL or BOXLITE_API_URL", "BOXLITE_API_KEY"], credential: "BOXLITE_API_KEY" },
] as const;

describe.each(CASES)("doctor and the stand-in for $vendor", ({ vendor, missing, credential }) => {
  let standIn: CloudStandIn;
  beforeAll(async () => {
    const started = await startStandIn(vendor, { PORT: "0" });
    if (started === null) throw new Error(`openma standin ${vendor} is not a stand-in`);
    standIn = started;
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("prints what to export, names what is missing, and reaches the provider through the SDK or says the credential is wrong", async () => {
    const text = describeStandIn(standIn);
    expect(text).toContain(`export OPENMA_SANDBOX=${vendor}`);
    for (const [name, value] of Object.entries(standIn.env)) expect(text).toContain(`export ${name}=${value}`);
    expect(loadConfig({ SANDBOX_PROVIDER: vendor }).brain.sandbox).toBe(vendor);

    expect(missingVariables(vendor, {})).toEqual(missing);
    expect(await checkRemoteSandboxes({ SANDBOX_PROVIDER: vendor }, 5_000)).toMatchObject([
      { id: `sandbox:${vendor}`, status: "missing", disables: [`OPENMA_SANDBOX=${vendor}`], facts: { selected: true } },
    ]);

    const before = standIn.requests.length;
    const reached = await checkRemoteSandboxes({ OPENMA_SANDBOX: vendor, ...standIn.env }, 5_000);
    expect(reached).toMatchObject([{ id: `sandbox:${vendor}`, status: "ok", facts: { owned: 0 } }]);
    // The listing really reached the stand-in, authorized.
    const listed = standIn.requests.slice(before);
    expect(listed.length).toBeGreaterThan(0);
    expect(listed.every((r) => r.authorized)).toBe(true);

    const wrong = await checkRemoteSandboxes({ ...standIn.env, [credential]: "wrong-credential" }, 5_000);
    expect(wrong).toMatchObject([{ id: `sandbox:${vendor}`, status: "warn" }]);
    expect(standIn.requests.slice(before).some((r) => !r.authorized)).toBe(true);
    expect(standIn.live()).toBe(0);
  });
});
