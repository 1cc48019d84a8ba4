/**
 * The shared driver suite on the Vercel driver, against the Vercel
 * stand-in: the official SDK speaks the REST API to it (routed by its
 * per-call `fetch`), and every sandbox is a real local container. Fails,
 * never skips, when dockerd or the sandbox images are missing. After the
 * suite the stand-in holds no sandbox and the engine no container of it.
 */
import { configFromStandIn, describeRemoteDriver } from "@openma/driver-suite/remote";
import { startVercelStandIn } from "@openma/standin-vercel";
import { createVercelDriver, vercelConfigFromEnv } from "./index.ts";

describeRemoteDriver("vercel", {
  start: () => startVercelStandIn(),
  open: (standIn) => createVercelDriver(configFromStandIn(vercelConfigFromEnv(standIn.env))),
  suite: {
    skips: {
      "bash: persistent shell":
        "Vercel commands take no stdin while they run (the conformance row lacks streaming_process_stdin), so there is no long-lived shell to feed; bash runs each command in a fresh shell",
    },
  },
});
