/**
 * The shared driver suite on the test-only subprocess driver. It serves
 * tools only (no ManagedSandboxPort, no mount namespace, no process
 * namespace), so the cases that need those are declared as skips, each
 * with the reason.
 */
import { describeDriver, hostProcesses } from "@openma/driver-suite";
import { SubprocessSandboxDriver } from "./driver.ts";

const NO_LIFECYCLE = "tools-only test driver: it has no ManagedSandboxPort, so there is no runtime or lease to";

describeDriver(
  "subprocess",
  async () => {
    const driver = new SubprocessSandboxDriver();
    return {
      sandbox: null,
      bindings: async () => {
        throw new Error("the subprocess driver has no bindings");
      },
      tools: async (_lease, sessionId) => driver.portFor(sessionId),
      readBinding: async () => null,
      reopen: async () => {
        throw new Error("the subprocess driver has no ManagedSandboxPort");
      },
      hostProcesses,
      close: () => driver.close(),
    };
  },
  {
    skips: {
      acquire: `${NO_LIFECYCLE} acquire (a session gets a host directory on first use)`,
      "terminate: idempotent": `${NO_LIFECYCLE} terminate (close() removes the directories)`,
      "reap: from a serialized lease": `${NO_LIFECYCLE} reap`,
      "inspect: after terminate": `${NO_LIFECYCLE} inspect`,
      "bindings: /workspace and /mnt/session/outputs":
        "no mount namespace: tools run in a per-session host directory, so /workspace and /mnt/session/outputs do not exist",
      "exec: abort kills the process tree":
        "plain host processes: the driver kills the process group, and a process that calls setsid leaves it; only a pid namespace catches that",
    },
  },
);
