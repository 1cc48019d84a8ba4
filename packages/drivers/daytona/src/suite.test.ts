/**
 * The shared driver suite on the Daytona driver, against the Daytona
 * stand-in: the official SDK speaks the REST API (polling mode) and the
 * toolbox API with its log WebSocket to it, and every sandbox is a real local container. Fails, never skips,
 * when dockerd or the sandbox images are missing. After the suite the
 * stand-in holds no sandbox and the engine no container of it.
 */
import { describeRemoteDriver } from "@openma/driver-suite/remote";
import { startDaytonaStandIn } from "@openma/standin-daytona";
import { createDaytonaDriver } from "./index.ts";

describeRemoteDriver("daytona", {
  start: () => startDaytonaStandIn(),
  open: (standIn) => createDaytonaDriver({ apiKey: standIn.env.DAYTONA_API_KEY as string, apiUrl: standIn.env.DAYTONA_API_URL }),
});
