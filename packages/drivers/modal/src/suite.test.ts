/**
 * The shared driver suite on the Modal driver, against the Modal stand-in:
 * the official SDK speaks gRPC (h2c) to its ModalClient and
 * TaskCommandRouter services, and every sandbox is a real local container
 * with its Volume v2 subpath bind-mounted at /workspace. Fails, never
 * skips, when dockerd or the sandbox images are missing. After the suite
 * the stand-in holds no sandbox and the engine no container of it.
 */
import { describeDriver } from "@openma/driver-suite";
import { remoteDriverUnderTest } from "@openma/driver-suite/remote";
import { type ModalStandIn, startModalStandIn } from "@openma/standin-modal";
import { afterAll, describe, expect, it } from "vitest";
import { createModalDriver, modalConfigFromEnv } from "./index.ts";

let standIn: ModalStandIn | undefined;

describeDriver("modal", async () => {
  standIn = await startModalStandIn();
  const config = modalConfigFromEnv(standIn.env);
  if ("missing" in config) throw new Error(`missing ${config.missing.join(", ")}`);
  return remoteDriverUnderTest({ open: () => createModalDriver(config), close: async () => {} });
});

describe("the modal stand-in after the suite", () => {
  afterAll(async () => {
    await standIn?.close();
  });

  it("holds no sandbox and the engine no container of it", async () => {
    expect(standIn).toBeDefined();
    expect(standIn!.live()).toBe(0);
    expect(await standIn!.boxes.containers()).toEqual([]);
  });
});
