/**
 * The shared driver suite on the Sprites driver, against the Sprites
 * stand-in: the official SDK speaks the platform's REST and exec WebSocket
 * to it, and every Sprite is a real local container. Fails, never skips,
 * when dockerd or the sandbox images are missing. After the suite the
 * stand-in holds no Sprite and the engine no container of it.
 */
import { describeRemoteDriver } from "@openma/driver-suite/remote";
import { startSpritesStandIn } from "@openma/standin-sprites";
import { createSpritesDriver } from "./index.ts";

describeRemoteDriver("sprites", {
  start: () => startSpritesStandIn(),
  open: (standIn) => createSpritesDriver({ token: standIn.env.SPRITES_TOKEN as string, apiUrl: standIn.url }),
  unit: "Sprite",
});
