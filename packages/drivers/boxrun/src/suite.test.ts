/**
 * The shared driver suite on the BoxRun driver, against the BoxRun
 * stand-in: the official REST client of `@boxlite-ai/boxlite` speaks
 * BoxLite's REST API and attach WebSocket to it, and every box is a real
 * local container. Fails, never skips, when dockerd or the sandbox images
 * are missing. After the suite the stand-in holds no box and the engine no
 * container of it.
 */
import { describeDriver } from "@openma/driver-suite";
import { remoteDriverUnderTest } from "@openma/driver-suite/remote";
import { type BoxRunStandIn, startBoxRunStandIn } from "@openma/standin-boxrun";
import { afterAll, describe, expect, it } from "vitest";
import { boxRunConfigFromEnv, createBoxRunDriver } from "./index.ts";

let standIn: BoxRunStandIn | undefined;

describeDriver("boxrun", async () => {
  standIn = await startBoxRunStandIn();
  const config = boxRunConfigFromEnv(standIn.env);
  if ("missing" in config) throw new Error(`the stand-in's env lacks ${config.missing.join(", ")}`);
  return remoteDriverUnderTest({ open: () => createBoxRunDriver(config), close: async () => {} });
});

describe("the boxrun stand-in after the suite", () => {
  afterAll(async () => {
    await standIn?.close();
  });

  it("holds no box and the engine no container of it", async () => {
    expect(standIn).toBeDefined();
    expect(standIn!.live()).toBe(0);
    expect(await standIn!.boxes.containers()).toEqual([]);
  });
});
