/**
 * The shared driver suite on the Superserve driver, against the Superserve
 * stand-in: the official SDK speaks the control plane to it over
 * `SUPERSERVE_BASE_URL` and its derived data plane over TLS through the
 * driver's redirect, and every sandbox is a real local container. Fails,
 * never skips, when dockerd or the sandbox images are missing. After the
 * suite the stand-in holds no sandbox and the engine no container of it.
 */

import { describeDriver } from "@openma/driver-suite";
import { remoteDriverUnderTest } from "@openma/driver-suite/remote";
import { type SuperserveStandIn, startSuperserveStandIn } from "@openma/standin-superserve";
import { afterAll, describe, expect, it } from "vitest";
import { createSuperserveDriver, superserveConfigFromEnv } from "./index.ts";

let standIn: SuperserveStandIn | undefined;

describeDriver("superserve", async () => {
  standIn = await startSuperserveStandIn();
  const config = superserveConfigFromEnv(standIn.env);
  if ("missing" in config) throw new Error(`the stand-in's env lacks ${config.missing.join(", ")}`);
  return remoteDriverUnderTest({ open: () => createSuperserveDriver(config), close: async () => {} });
});

describe("the superserve stand-in after the suite", () => {
  afterAll(async () => {
    await standIn?.close();
  });

  it("holds no sandbox and the engine no container of it", async () => {
    expect(standIn).toBeDefined();
    expect(standIn!.live()).toBe(0);
    expect(await standIn!.boxes.containers()).toEqual([]);
  });
});
