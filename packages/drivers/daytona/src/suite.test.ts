/**
 * The shared driver suite on the Daytona driver, against the Daytona
 * stand-in: the official SDK speaks the REST API (polling mode) and the
 * toolbox API with its log WebSocket to it, and every sandbox is a real local container. Fails, never skips,
 * when dockerd or the sandbox images are missing. After the suite the
 * stand-in holds no sandbox and the engine no container of it.
 */
import { describeDriver } from "@openma/driver-suite";
import { remoteDriverUnderTest } from "@openma/driver-suite/remote";
import { type DaytonaStandIn, startDaytonaStandIn } from "@openma/standin-daytona";
import { afterAll, describe, expect, it } from "vitest";
import { createDaytonaDriver } from "./index.ts";

let standIn: DaytonaStandIn | undefined;

describeDriver("daytona", async () => {
  standIn = await startDaytonaStandIn();
  const config = { apiKey: standIn.env.DAYTONA_API_KEY as string, apiUrl: standIn.env.DAYTONA_API_URL };
  return remoteDriverUnderTest({ open: () => createDaytonaDriver(config), close: async () => {} });
});

describe("the daytona stand-in after the suite", () => {
  afterAll(async () => {
    await standIn?.close();
  });

  it("holds no sandbox and the engine no container of it", async () => {
    expect(standIn).toBeDefined();
    expect(standIn!.live()).toBe(0);
    expect(await standIn!.boxes.containers()).toEqual([]);
  });
});
