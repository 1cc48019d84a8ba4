/**
 * @openma/driver-sprites: Fly Sprites as an OpenMA sandbox driver
 * (ManagedSandboxPort, SandboxInventoryPort, ToolSandboxPort and
 * SandboxProcessPort) through the official `@fly/sprites` SDK.
 */
import type { SandboxCapabilities } from "@openma/contract";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { type SpritesConfig, SpritesProvider } from "./provider.ts";

export { type SpritesConfig, SpritesProvider } from "./provider.ts";

export const SPRITES_PROVIDER = "sprites";

export const SPRITES_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: SPRITES_PROVIDER,
  // Sprites sleep and wake on their own: a retained Sprite keeps its filesystem, and (while only warm) its processes.
  lifecycle: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    has: [
      "stable_name_and_ownership_labels",
      "persistent_ext4_filesystem",
      "automatic_pause_and_wake",
      "duplex_process",
      "workspace_file_io",
    ],
    // The platform's network policy exists but this adapter does not configure it.
    lacks: ["process_memory_checkpoint", "native_network_policy"],
  },
  credentialEgress: { enforcement: "unsupported" },
};

/** The variables the driver reads, named as the Sprites CLI names them. */
export const SPRITES_ENV = { token: ["SPRITES_TOKEN", "SPRITE_TOKEN"], apiUrl: "SPRITES_API_URL" } as const;

export function spritesConfigFromEnv(env: Readonly<Record<string, string | undefined>>): SpritesConfig | { missing: string[] } {
  const token = env.SPRITES_TOKEN ?? env.SPRITE_TOKEN;
  if (!token) return { missing: ["SPRITES_TOKEN"] };
  return { token, apiUrl: env.SPRITES_API_URL || undefined };
}

export type SpritesDriver = RemoteSandboxDriver;

export function createSpritesDriver(config: SpritesConfig, options: RemoteDriverOptions = {}): SpritesDriver {
  const prefix = options.namePrefix ?? "openma";
  return new RemoteSandboxDriver(new SpritesProvider({ ...config, listPrefix: `${prefix}-` }), SPRITES_SANDBOX_CAPABILITIES, options);
}
