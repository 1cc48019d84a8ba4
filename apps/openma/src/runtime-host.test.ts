/** The runtime host's configuration and driver choice (the lane itself runs in test/runtime-host). */
import { describe, expect, it } from "vitest";
import { loadConfig } from "./config.ts";
import { resolveRuntimeHostDriver } from "./runtime-host.ts";
import type { AvailabilityProbes } from "./sandbox.ts";

const probes = (bwrap: boolean, docker: boolean): AvailabilityProbes => ({
  bubblewrap: async () => (bwrap ? { ok: true } : { ok: false, reason: "no bwrap here" }),
  docker: async () => (docker ? { ok: true, image: "openma/sandbox-base:x" } : { ok: false, reason: "no dockerd here" }),
});

describe("runtime host configuration", () => {
  it("is off unless an environment is named, and then needs its key", () => {
    expect(loadConfig({}).runtimeHost).toBeUndefined();
    expect(() => loadConfig({ OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: "env_1" })).toThrow(/needs ANTHROPIC_ENVIRONMENT_KEY/);
    const config = loadConfig({
      OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: "env_1",
      ANTHROPIC_ENVIRONMENT_KEY: "sk-ant-env-0123456789",
      PORT: "9000",
    });
    expect(config.runtimeHost).toEqual({
      environmentId: "env_1",
      environmentKey: "sk-ant-env-0123456789",
      sandbox: "auto",
      concurrency: 4,
      fenceTtlMs: 90_000,
      workerMaxIdleMs: undefined,
      apiUrl: "http://127.0.0.1:9000",
      harness: { type: "ama_worker" },
    });
    // OPENMA_RUNTIME_HOST_HARNESS=acp (ADR 0034) runs the pinned ACP agents; their gateway needs the model settings.
    const acp = { OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: "env_1", ANTHROPIC_ENVIRONMENT_KEY: "sk-ant-env-0123456789" };
    expect(() => loadConfig({ ...acp, OPENMA_RUNTIME_HOST_HARNESS: "acp" })).toThrow(/needs OPENMA_MODEL_BASE_URL/);
    expect(
      loadConfig({ ...acp, OPENMA_RUNTIME_HOST_HARNESS: "acp", OPENMA_MODEL_BASE_URL: "http://model:1", OPENMA_MODEL_API_KEY: "sk-m" })
        .runtimeHost?.harness,
    ).toEqual({ type: "acp", model: { baseUrl: "http://model:1", apiKey: "sk-m" } });
    // OPENMA_WARM_POOL's entry for the host's environment is its pool (docs/warm-pools.md).
    const pooled = loadConfig({
      OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: "env_1",
      ANTHROPIC_ENVIRONMENT_KEY: "sk-ant-env-0123456789",
      OPENMA_WARM_POOL: "env_1=3,env_2=1",
    });
    expect(pooled.runtimeHost?.warmPool).toEqual({ target: 3, leaseTtlMs: 60_000, reapIntervalMs: 30_000 });
    expect(() => loadConfig({ OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: "env 1", ANTHROPIC_ENVIRONMENT_KEY: "sk-ant-env-0123456789" })).toThrow(
      /OPENMA_RUNTIME_HOST_ENVIRONMENT_ID/,
    );
  });

  it("picks bubblewrap, then Docker, and refuses to start without either", async () => {
    expect(await resolveRuntimeHostDriver("auto", probes(true, true))).toBe("bubblewrap");
    expect(await resolveRuntimeHostDriver("auto", probes(false, true))).toBe("docker");
    expect(await resolveRuntimeHostDriver("docker", probes(true, true))).toBe("docker");
    await expect(resolveRuntimeHostDriver("auto", probes(false, false))).rejects.toThrow(
      /runtime host cannot start.*no bwrap here.*no dockerd here/,
    );
    await expect(resolveRuntimeHostDriver("bubblewrap", probes(false, true))).rejects.toThrow(/bubblewrap sandbox driver is not usable/);
  });
});
