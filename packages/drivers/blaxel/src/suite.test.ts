/**
 * The shared driver suite on the Blaxel driver, against the Blaxel
 * stand-in: the official SDK speaks the control plane and sandbox-api to
 * it, and every sandbox is a real local container. Fails, never skips,
 * when dockerd or the sandbox images are missing. After the suite the
 * stand-in holds no sandbox and the engine no container of it.
 */
import { configFromStandIn, describeRemoteDriver } from "@openma/driver-suite/remote";
import { startBlaxelStandIn } from "@openma/standin-blaxel";
import { blaxelConfigFromEnv, createBlaxelDriver } from "./index.ts";

describeRemoteDriver("blaxel", {
  start: () => startBlaxelStandIn(),
  open: (standIn) => createBlaxelDriver(configFromStandIn(blaxelConfigFromEnv(standIn.env))),
});
