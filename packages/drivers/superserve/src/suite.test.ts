/**
 * The shared driver suite on the Superserve driver, against the Superserve
 * stand-in: the official SDK speaks the control plane to it over
 * `SUPERSERVE_BASE_URL` and its derived data plane over TLS through the
 * driver's redirect, and every sandbox is a real local container. Fails,
 * never skips, when dockerd or the sandbox images are missing. After the
 * suite the stand-in holds no sandbox and the engine no container of it.
 */
import { configFromStandIn, describeRemoteDriver } from "@openma/driver-suite/remote";
import { startSuperserveStandIn } from "@openma/standin-superserve";
import { createSuperserveDriver, superserveConfigFromEnv } from "./index.ts";

describeRemoteDriver("superserve", {
  start: () => startSuperserveStandIn(),
  open: (standIn) => createSuperserveDriver(configFromStandIn(superserveConfigFromEnv(standIn.env))),
});
