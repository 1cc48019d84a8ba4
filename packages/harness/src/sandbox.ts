/** The resolver a server without a sandbox driver uses: every sandbox tool call fails closed with this reason. */
import type { SandboxResolver } from "@openma/contract";

export const NO_SANDBOX_DRIVER =
  "no sandbox driver is configured on this server, so sandbox tools (bash, read, write, edit, glob, grep) cannot run; " +
  "use a self_hosted environment with a worker, or configure a sandbox driver";

export const noSandboxResolver: SandboxResolver = {
  resolve: async () => ({ type: "unavailable", reason: NO_SANDBOX_DRIVER }),
};
