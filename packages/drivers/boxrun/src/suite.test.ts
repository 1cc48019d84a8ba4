/**
 * The shared driver suite on the BoxRun driver, against the BoxRun
 * stand-in: the official REST client of `@boxlite-ai/boxlite` speaks
 * BoxLite's REST API and attach WebSocket to it, and every box is a real
 * local container. Fails, never skips, when dockerd or the sandbox images
 * are missing. After the suite the stand-in holds no box and the engine no
 * container of it.
 */
import { configFromStandIn, describeRemoteDriver } from "@openma/driver-suite/remote";
import { startBoxRunStandIn } from "@openma/standin-boxrun";
import { boxRunConfigFromEnv, createBoxRunDriver } from "./index.ts";

describeRemoteDriver("boxrun", {
  start: () => startBoxRunStandIn(),
  open: (standIn) => createBoxRunDriver(configFromStandIn(boxRunConfigFromEnv(standIn.env))),
  unit: "box",
});
