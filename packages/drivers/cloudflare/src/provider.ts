/**
 * Our Cloudflare Worker (packages/cloudflare-worker) as a CloudProvider: the
 * cloudflare-bridge provider does everything the bridge routes do (derived
 * ids, ownership file, spooled exec, files), and this one adds what only
 * our Worker has, `PUT /openma/v1/sandbox/{id}/egress` (ADR 0019):
 *
 * - at create, and again when an acquire adopts an existing runtime, the
 *   session's egress (its environment's networking and its vaults'
 *   `environment_variable` credentials, from `egressConfig`) goes to the
 *   Worker, which keeps the secrets in the sandbox's Durable Object and
 *   answers one placeholder per credential;
 * - the placeholders (never a secret) are written into the container at
 *   ENV_FILE, outside /workspace so no checkpoint carries them, and every
 *   command starts through a wrapper that exports them first. A file rather
 *   than a bridge session: any process holding only the lease runs commands
 *   with them, and an adopting acquire replaces them in one write.
 *
 * Until the configuration is stored the Worker lets nothing out of the
 * container, and a command never starts without the file, so no command of
 * the session runs before its egress is in force.
 */
import type { EgressConfigInput } from "@openma/cloudflare-worker/egress";
import type { RuntimeResourceScope } from "@openma/contract";
import { CloudflareBridgeProvider } from "@openma/driver-cloudflare-bridge";
import { type CloudProvider, ownershipOf, type ProviderRuntime, type RemoteSandboxApi } from "@openma/driver-kit/remote";
import { allowedHostsOf, type SandboxEgressConfig } from "@openma/egress";
import { z } from "zod";

export const CLOUDFLARE_PROVIDER = "cloudflare";

/** Where the placeholders live in the container: beside the bridge driver's ownership record. */
export const ENV_FILE = "/var/lib/openma/egress.env";

/** Exports the placeholders (`$1`), then runs the command; without the file nothing runs. */
const WITH_EGRESS_ENV =
  'f=$1; shift; [ -f "$f" ] || { echo "openma: this sandbox has no egress configuration" >&2; exit 126; }; . "$f" || exit 126; exec "$@"';

export interface CloudflareConfig {
  /** `CLOUDFLARE_WORKER_URL`: the origin of our Worker (deployed from packages/cloudflare-worker). */
  url: string;
  /** `SANDBOX_API_KEY`: the Worker's Bearer token (its bridge routes and its egress route). */
  apiKey: string;
}

export interface CloudflareEgressOptions {
  /**
   * A session's egress, as the host resolves it from storage (the same
   * `sessionEgressConfig` the local gateway uses). Absent: nothing may leave
   * and no credential is given (fail closed).
   */
  egressConfig?(input: { scope: RuntimeResourceScope; signal: AbortSignal }): Promise<SandboxEgressConfig>;
  /** The registries' hosts `allow_package_managers` adds (OPENMA_EGRESS_PACKAGE_MANAGER_HOSTS). */
  packageManagerHosts?: readonly string[];
  /** A fetch to use instead of the global one (tests). */
  fetch?: typeof fetch;
}

const NOTHING: SandboxEgressConfig = { networking: { type: "limited", allowed_hosts: [] }, credentials: [] };

/** The Worker's answer: one placeholder per credential, under its secret_name. */
const EgressAnswer = z.object({
  env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string().regex(/^[A-Za-z0-9_-]+$/)),
});

/** The Worker's request body for one session's egress (ADR 0019's `PUT .../egress`). */
export function egressRequest(config: SandboxEgressConfig, packageManagerHosts: readonly string[] = []): EgressConfigInput {
  const hosts = allowedHostsOf({ networking: config.networking, packageManagerHosts, mcpServerHosts: config.mcpServerHosts });
  return {
    networking: hosts === null ? { type: "unrestricted" } : { type: "limited", allowed_hosts: hosts },
    credentials: config.credentials.map((c) => ({
      secret_name: c.secretName,
      secret: c.secret,
      allowed_hosts: c.hosts === null ? null : [...c.hosts],
      injection_location: { header: c.header, body: c.body },
    })),
  };
}

/** `export NAME='placeholder'` lines; the Worker's answer was checked to hold only safe names and values. */
function envFile(env: Readonly<Record<string, string>>): Uint8Array {
  return Buffer.from(
    Object.entries(env)
      .map(([name, value]) => `export ${name}='${value}'\n`)
      .join(""),
  );
}

export class EgressInstallError extends Error {
  constructor(
    readonly status: number | null,
    message: string,
  ) {
    super(message);
    this.name = "EgressInstallError";
  }
}

export class CloudflareProvider implements CloudProvider {
  readonly name = CLOUDFLARE_PROVIDER;
  readonly stdinEof: boolean;
  readonly streamingStdin: boolean;
  readonly bridge: CloudflareBridgeProvider;
  readonly #config: CloudflareConfig;
  readonly #egress: CloudflareEgressOptions;

  constructor(config: CloudflareConfig, egress: CloudflareEgressOptions = {}) {
    this.bridge = new CloudflareBridgeProvider(config);
    this.stdinEof = this.bridge.stdinEof;
    this.streamingStdin = this.bridge.streamingStdin;
    this.#config = config;
    this.#egress = egress;
  }

  /** An adopted runtime gets the session's egress again: its placeholders are minted anew and rewritten. */
  async find(input: { name: string; labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime | null> {
    const runtime = await this.bridge.find(input);
    if (runtime !== null) await this.#install(runtime, input.signal);
    return runtime;
  }

  async create(input: { name: string; labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime> {
    const runtime = await this.bridge.create(input);
    try {
      await this.#install(runtime, input.signal);
    } catch (err) {
      await this.bridge.destroy({ id: runtime.id, signal: AbortSignal.timeout(60_000) }).catch(() => {});
      throw err;
    }
    return runtime;
  }

  /** Sends the session's egress to the Worker and writes the placeholders it answers into the container. */
  async #install(runtime: ProviderRuntime, signal: AbortSignal): Promise<void> {
    const owner = ownershipOf(runtime.labels, this.name);
    if (owner === null) throw new Error(`runtime ${runtime.id} carries no ownership labels of the ${this.name} driver`);
    const config = (await this.#egress.egressConfig?.({ scope: owner.scope, signal })) ?? NOTHING;
    const body = egressRequest(config, this.#egress.packageManagerHosts);
    const response = await (this.#egress.fetch ?? fetch)(
      `${this.#config.url.replace(/\/+$/, "")}/openma/v1/sandbox/${encodeURIComponent(runtime.id)}/egress`,
      {
        method: "PUT",
        headers: { authorization: `Bearer ${this.#config.apiKey}`, "content-type": "application/json" },
        body: JSON.stringify(body),
        signal,
      },
    );
    const answer = await response.json().catch(() => null);
    if (!response.ok) {
      // The Worker's error body never echoes the request, so it carries no secret.
      const why = (answer as { error?: unknown } | null)?.error;
      throw new EgressInstallError(response.status, `egress: ${response.status} ${typeof why === "string" ? why : "refused"}`);
    }
    const parsed = EgressAnswer.safeParse(answer);
    if (!parsed.success) throw new EgressInstallError(null, "egress: the Worker's answer is not a placeholder map");
    const api = await this.bridge.api({ id: runtime.id });
    await api.writeFile(ENV_FILE, envFile(parsed.data.env), signal);
  }

  idFor(name: string): string {
    return this.bridge.idFor(name);
  }

  get(input: { id: string; signal: AbortSignal }): Promise<ProviderRuntime | null> {
    return this.bridge.get(input);
  }

  list(input: { labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime[]> {
    return this.bridge.list(input);
  }

  resume(): Promise<void> {
    return this.bridge.resume();
  }

  suspend(): Promise<void> {
    return this.bridge.suspend();
  }

  destroy(input: { id: string; signal: AbortSignal }): Promise<"destroyed" | "not_found"> {
    return this.bridge.destroy(input);
  }

  renew(): Promise<void> {
    return this.bridge.renew();
  }

  /** The bridge's commands and files, every command started with the placeholders exported. */
  async api(input: { id: string; signal: AbortSignal }): Promise<RemoteSandboxApi> {
    const base = await this.bridge.api(input);
    return {
      ...base,
      start: (start) => base.start({ ...start, argv: ["/bin/sh", "-c", WITH_EGRESS_ENV, "openma-egress", ENV_FILE, ...start.argv] }),
    };
  }

  describe(err: unknown) {
    if (err instanceof EgressInstallError && err.status !== null) {
      const status = err.status;
      return { retryable: status >= 500 || status === 429, notFound: false, conflict: false, message: err.message };
    }
    return this.bridge.describe(err);
  }

  close(): Promise<void> {
    return this.bridge.close();
  }
}
