/**
 * The shared driver suite on the Blaxel driver, against the Blaxel
 * stand-in: the official SDK speaks the control plane and sandbox-api to
 * it, and every sandbox is a real local container. Fails, never skips,
 * when dockerd or the sandbox images are missing. After the suite the
 * stand-in holds no sandbox and the engine no container of it.
 */

import { describeDriver } from "@openma/driver-suite";
import { remoteDriverUnderTest } from "@openma/driver-suite/remote";
import { type BlaxelStandIn, startBlaxelStandIn } from "@openma/standin-blaxel";
import { afterAll, describe, expect, it } from "vitest";
import { blaxelConfigFromEnv, createBlaxelDriver } from "./index.ts";

let standIn: BlaxelStandIn | undefined;

describeDriver("blaxel", async () => {
  standIn = await startBlaxelStandIn();
  const config = blaxelConfigFromEnv(standIn.env);
  if ("missing" in config) throw new Error(`the stand-in's env lacks ${config.missing.join(", ")}`);
  return remoteDriverUnderTest({ open: () => createBlaxelDriver(config), close: async () => {} });
});

describe("the blaxel stand-in after the suite", () => {
  afterAll(async () => {
    await standIn?.close();
  });

  it("holds no sandbox and the engine no container of it", async () => {
    expect(standIn).toBeDefined();
    expect(standIn!.live()).toBe(0);
    expect(await standIn!.boxes.containers()).toEqual([]);
  });
});
