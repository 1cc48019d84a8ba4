/**
 * The shared driver suite on the E2B driver, against the E2B
 * stand-in: the official SDK speaks the control plane's REST and envd's
 * Connect-RPC to it, and every sandbox is a real local container. Fails, never skips,
 * when dockerd or the sandbox images are missing. After the suite the
 * stand-in holds no sandbox and the engine no container of it.
 */
import { describeRemoteDriver } from "@openma/driver-suite/remote";
import { startE2BStandIn } from "@openma/standin-e2b";
import { createE2BDriver } from "./index.ts";

describeRemoteDriver("e2b", {
  start: () => startE2BStandIn(),
  open: (standIn) => createE2BDriver({ apiKey: standIn.env.E2B_API_KEY as string, apiUrl: standIn.url, sandboxUrl: standIn.url }),
});
