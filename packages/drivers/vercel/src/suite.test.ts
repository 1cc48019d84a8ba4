/**
 * The shared driver suite on the Vercel driver, against the Vercel
 * stand-in: the official SDK speaks the REST API to it (routed by its
 * per-call `fetch`), and every sandbox is a real local container. Fails,
 * never skips, when dockerd or the sandbox images are missing. After the
 * suite the stand-in holds no sandbox and the engine no container of it.
 */

import { describeDriver } from "@openma/driver-suite";
import { remoteDriverUnderTest } from "@openma/driver-suite/remote";
import { startVercelStandIn, type VercelStandIn } from "@openma/standin-vercel";
import { afterAll, describe, expect, it } from "vitest";
import { createVercelDriver, vercelConfigFromEnv } from "./index.ts";

let standIn: VercelStandIn | undefined;

describeDriver(
  "vercel",
  async () => {
    standIn = await startVercelStandIn();
    const config = vercelConfigFromEnv(standIn.env);
    if ("missing" in config) throw new Error(`the stand-in's env lacks ${config.missing.join(", ")}`);
    return remoteDriverUnderTest({ open: () => createVercelDriver(config), close: async () => {} });
  },
  {
    skips: {
      "bash: persistent shell":
        "Vercel commands take no stdin while they run (the conformance row lacks streaming_process_stdin), so there is no long-lived shell to feed; bash runs each command in a fresh shell",
    },
  },
);

describe("the vercel stand-in after the suite", () => {
  afterAll(async () => {
    await standIn?.close();
  });

  it("holds no sandbox and the engine no container of it", async () => {
    expect(standIn).toBeDefined();
    expect(standIn!.live()).toBe(0);
    expect(await standIn!.boxes.containers()).toEqual([]);
  });
});
