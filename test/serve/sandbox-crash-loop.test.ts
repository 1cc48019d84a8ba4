/**
 * No session sandbox outlives its owner (issue 21), per local driver: the
 * kill -9 loop of test/support/crash-loop.ts, counted at the Docker Engine
 * by label and, for bubblewrap, by the runtime records whose processes live.
 */
import { hostProbes } from "../../apps/openma/src/sandbox.ts";
import { describeCrashLoop } from "../support/crash-loop.ts";

describeCrashLoop("docker", {
  seed: 21,
  async setup() {
    const probe = await hostProbes.docker();
    if (!probe.ok) throw new Error(`docker is required for this test: ${probe.reason}`);
  },
  env: () => ({ OPENMA_SANDBOX: "docker" }),
  async live(deployment) {
    const { connectDocker } = await import("@openma/driver-node-docker");
    const filters = { label: ["openma.lane=serve", `openma.deployment=${deployment}`], status: ["running"] };
    return (await connectDocker().listContainers({ filters })).length;
  },
});

describeCrashLoop("bubblewrap", {
  seed: 12,
  async setup() {
    const probe = await hostProbes.bubblewrap();
    if (!probe.ok) throw new Error(`bubblewrap is required for this test: ${probe.reason}`);
  },
  env: () => ({ OPENMA_SANDBOX: "bubblewrap" }),
  async live(deployment) {
    const { BubblewrapSandbox } = await import("@openma/driver-bubblewrap");
    const labels = { "openma.lane": "serve", "openma.deployment": deployment };
    const listed = await new BubblewrapSandbox({ labels }).listOwned({ signal: AbortSignal.timeout(10_000) });
    if (listed.type === "failed") throw new Error(listed.error);
    return listed.runtimes.filter((r) => r.state === "running").length;
  },
});
