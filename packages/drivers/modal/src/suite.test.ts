/**
 * The shared driver suite on the Modal driver, against the Modal stand-in:
 * the official SDK speaks gRPC (h2c) to its ModalClient and
 * TaskCommandRouter services, and every sandbox is a real local container
 * with its Volume v2 subpath bind-mounted at /workspace. Fails, never
 * skips, when dockerd or the sandbox images are missing. After the suite
 * the stand-in holds no sandbox and the engine no container of it.
 */
import { configFromStandIn, describeRemoteDriver } from "@openma/driver-suite/remote";
import { startModalStandIn } from "@openma/standin-modal";
import { createModalDriver, modalConfigFromEnv } from "./index.ts";

describeRemoteDriver("modal", {
  start: () => startModalStandIn(),
  open: (standIn) => createModalDriver(configFromStandIn(modalConfigFromEnv(standIn.env))),
});
