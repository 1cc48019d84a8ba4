/**
 * The shared driver suite on the Sprites driver, against the Sprites
 * stand-in: the official SDK speaks the platform's REST and exec WebSocket
 * to it, and every Sprite is a real local container. Fails, never skips,
 * when dockerd or the sandbox images are missing. After the suite the
 * stand-in holds no Sprite and the engine no container of it.
 */
import { describeDriver } from "@openma/driver-suite";
import { remoteDriverUnderTest } from "@openma/driver-suite/remote";
import { type SpritesStandIn, startSpritesStandIn } from "@openma/standin-sprites";
import { afterAll, describe, expect, it } from "vitest";
import { createSpritesDriver } from "./index.ts";

let standIn: SpritesStandIn | undefined;

describeDriver("sprites", async () => {
  standIn = await startSpritesStandIn();
  const config = { token: standIn.env.SPRITES_TOKEN as string, apiUrl: standIn.url };
  return remoteDriverUnderTest({ open: () => createSpritesDriver(config), close: async () => {} });
});

describe("the sprites stand-in after the suite", () => {
  afterAll(async () => {
    await standIn?.close();
  });

  it("holds no Sprite and the engine no container of it", async () => {
    expect(standIn).toBeDefined();
    expect(standIn!.live()).toBe(0);
    expect(await standIn!.boxes.containers()).toEqual([]);
  });
});
