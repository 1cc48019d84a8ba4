/**
 * The shared driver suite on the E2B driver, against the E2B
 * stand-in: the official SDK speaks the control plane's REST and envd's
 * Connect-RPC to it, and every sandbox is a real local container. Fails, never skips,
 * when dockerd or the sandbox images are missing. After the suite the
 * stand-in holds no sandbox and the engine no container of it.
 */
import { describeDriver } from "@openma/driver-suite";
import { remoteDriverUnderTest } from "@openma/driver-suite/remote";
import { type E2BStandIn, startE2BStandIn } from "@openma/standin-e2b";
import { afterAll, describe, expect, it } from "vitest";
import { createE2BDriver } from "./index.ts";

let standIn: E2BStandIn | undefined;

describeDriver("e2b", async () => {
  standIn = await startE2BStandIn();
  const config = { apiKey: standIn.env.E2B_API_KEY as string, apiUrl: standIn.url, sandboxUrl: standIn.url };
  return remoteDriverUnderTest({ open: () => createE2BDriver(config), close: async () => {} });
});

describe("the e2b stand-in after the suite", () => {
  afterAll(async () => {
    await standIn?.close();
  });

  it("holds no sandbox and the engine no container of it", async () => {
    expect(standIn).toBeDefined();
    expect(standIn!.live()).toBe(0);
    expect(await standIn!.boxes.containers()).toEqual([]);
  });
});
