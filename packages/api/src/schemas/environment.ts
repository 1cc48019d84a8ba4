/**
 * Environment request schemas, the response shape, and the config rules of
 * §2.1: a cloud config is stored fully expanded (every inner field present),
 * and a partial cloud config on update is merged into the stored one.
 */
import { z } from "zod";
import { badRequest } from "../errors.ts";
import { describeIssues } from "../validate.ts";

/** Ids this server mints are `prefix_base32`; anything else (e.g. a NUL, which Postgres text refuses) cannot name a row. */
export function isPlausibleId(id: string): boolean {
  return /^[A-Za-z0-9_-]{1,256}$/.test(id);
}

/** Strings stored in their own column (not inside a JSON body) must be storable on Postgres: no NUL. */
const noNul = (s: string) => !s.includes("\u0000");
const NUL_MESSAGE = "must not contain NUL characters";

const hostList = z.array(z.string().min(1).max(253)).max(256);
const packageList = z.array(z.string().min(1).max(256)).max(256);
const nameParam = z.string().min(1).max(256).refine(noNul, NUL_MESSAGE);

const unrestrictedNetwork = z.object({ type: z.literal("unrestricted") });
const limitedNetworkParam = z.object({
  type: z.literal("limited"),
  allow_mcp_servers: z.boolean().nullish(),
  allow_package_managers: z.boolean().nullish(),
  allowed_hosts: hostList.nullish(),
});
const networkingParam = z.discriminatedUnion("type", [unrestrictedNetwork, limitedNetworkParam]);

const PACKAGE_MANAGERS = ["apt", "cargo", "gem", "go", "npm", "pip"] as const;
type PackageManager = (typeof PACKAGE_MANAGERS)[number];

const packagesParam = z.object({
  type: z.literal("packages").optional(),
  apt: packageList.nullish(),
  cargo: packageList.nullish(),
  gem: packageList.nullish(),
  go: packageList.nullish(),
  npm: packageList.nullish(),
  pip: packageList.nullish(),
});

const cloudConfigParam = z.object({
  type: z.literal("cloud"),
  networking: networkingParam.nullish(),
  packages: packagesParam.nullish(),
});
const selfHostedConfigParam = z.object({ type: z.literal("self_hosted") });
// OpenMA extension: a sandbox-free environment (chat-only agents; sandbox tools are refused).
const noneConfigParam = z.object({ type: z.literal("none") });

export const configParam = z.discriminatedUnion("type", [cloudConfigParam, selfHostedConfigParam, noneConfigParam]);
export type ConfigParam = z.infer<typeof configParam>;

const scopeParam = z.enum(["organization", "account"]);

/**
 * Metadata is validated separately (see `parseMetadata`) so every metadata
 * problem carries `error_code: invalid_metadata`, as the SDK's
 * BetaInvalidMetadataError expects.
 */
export const environmentCreateSchema = z.object({
  name: nameParam,
  description: z.string().max(2048).nullish(),
  config: configParam.nullish(),
  metadata: z.unknown().optional(),
  scope: scopeParam.nullish(),
});

export const environmentUpdateSchema = z.object({
  name: nameParam.nullish(),
  description: z.string().max(2048).nullish(),
  config: configParam.nullish(),
  metadata: z.unknown().optional(),
  scope: scopeParam.nullish(),
});

export type Networking =
  | { type: "unrestricted" }
  | { type: "limited"; allowed_hosts: string[]; allow_mcp_servers: boolean; allow_package_managers: boolean };

export type Packages = { type: "packages" } & Record<PackageManager, string[]>;

export type EnvironmentConfig = { type: "cloud"; networking: Networking; packages: Packages } | { type: "self_hosted" } | { type: "none" };

export interface Environment {
  type: "environment";
  id: string;
  name: string;
  description: string | null;
  config: EnvironmentConfig;
  metadata: Record<string, string>;
  scope?: "organization" | "account";
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

type NetworkingParam = z.infer<typeof networkingParam>;
type PackagesParam = z.infer<typeof packagesParam>;

/** Limited networking merged over a base (stored value or defaults); null inner fields mean "not given". */
function mergeNetworking(param: NetworkingParam, base: Networking | undefined): Networking {
  if (param.type === "unrestricted") return { type: "unrestricted" };
  const prev = base?.type === "limited" ? base : undefined;
  return {
    type: "limited",
    allowed_hosts: param.allowed_hosts ?? prev?.allowed_hosts ?? [],
    allow_mcp_servers: param.allow_mcp_servers ?? prev?.allow_mcp_servers ?? false,
    allow_package_managers: param.allow_package_managers ?? prev?.allow_package_managers ?? false,
  };
}

function mergePackages(param: PackagesParam | null | undefined, base: Packages | undefined): Packages {
  const out = { type: "packages" } as Packages;
  for (const manager of PACKAGE_MANAGERS) out[manager] = param?.[manager] ?? base?.[manager] ?? [];
  return out;
}

/**
 * The stored config for a request config. With `current` (an update), omitted
 * or null inner fields keep their stored value; a changed `type` is refused.
 * Without a config on create, the default is cloud with unrestricted
 * networking and no packages.
 */
export function resolveConfig(param: ConfigParam | null | undefined, current?: EnvironmentConfig): EnvironmentConfig {
  if (param === null || param === undefined) {
    return current ?? { type: "cloud", networking: { type: "unrestricted" }, packages: mergePackages(undefined, undefined) };
  }
  if (current && current.type !== param.type) {
    throw badRequest(`config.type: cannot change an environment's config type from ${current.type} to ${param.type}`, {
      error_code: "invalid_config_type_change",
    });
  }
  if (param.type === "self_hosted" || param.type === "none") return { type: param.type };
  const stored = current?.type === "cloud" ? current : undefined;
  return {
    type: "cloud",
    networking: param.networking ? mergeNetworking(param.networking, stored?.networking) : (stored?.networking ?? { type: "unrestricted" }),
    packages: mergePackages(param.packages, stored?.packages),
  };
}

export const METADATA_MAX_PAIRS = 16;

const metadataValues = z
  .record(
    z.string().min(1, "metadata keys must not be empty").max(64, "metadata keys must be at most 64 characters"),
    z.string().max(512, "metadata values must be at most 512 characters"),
  )
  .refine((m) => Object.keys(m).length <= METADATA_MAX_PAIRS, `at most ${METADATA_MAX_PAIRS} metadata pairs`);

const metadataPatchValues = z.record(
  z.string().min(1, "metadata keys must not be empty").max(64, "metadata keys must be at most 64 characters"),
  z.string().max(512, "metadata values must be at most 512 characters").nullable(),
);

function metadataError(error: z.ZodError, root: string) {
  return badRequest(describeIssues(error, root), { error_code: "invalid_metadata" });
}

/** Full metadata (create): a 400 `invalid_metadata` naming the field on any problem. */
export function parseMetadata(value: unknown, root = "body.metadata"): Record<string, string> {
  if (value === undefined || value === null) return {};
  const result = metadataValues.safeParse(value);
  if (!result.success) throw metadataError(result.error, root);
  return result.data;
}

/** A metadata patch (update): a `null` or `""` value deletes a key; `null` for the whole patch clears it. */
export function parseMetadataPatch(value: unknown, root = "body.metadata"): Record<string, string | null> | null | undefined {
  if (value === undefined || value === null) return value;
  const result = metadataPatchValues.safeParse(value);
  if (!result.success) throw metadataError(result.error, root);
  return result.data;
}
