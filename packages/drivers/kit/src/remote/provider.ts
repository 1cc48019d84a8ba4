/**
 * What a cloud sandbox vendor must answer for the kit's RemoteSandboxDriver
 * to be a complete ManagedSandboxPort, SandboxInventoryPort and tool/process
 * port: a handful of lifecycle calls through the vendor's official SDK, and
 * the RemoteSandboxApi of a runtime. Adding a vendor is writing one of these.
 */
import type { RemoteSandboxApi } from "./api.ts";

/**
 * A runtime as the provider reports it.
 * - `running`: up, commands run now.
 * - `sleeping`: paused by the provider on its own and woken by the next request (Sprites): alive for heartbeats.
 * - `suspended`: paused or stopped on request; a resume brings it back with its disk (and memory, where the provider keeps it).
 * - `starting`: on its way to running.
 * - `failed`: the provider gave up on it (an error or build failure state); only deletion helps.
 */
export type ProviderState = "running" | "sleeping" | "suspended" | "starting" | "failed";

export interface ProviderRuntime {
  /** The provider's id (what its SDK's get/kill take). */
  id: string;
  /** The stable name, where the provider has names (Daytona, Sprites); the id otherwise. */
  name: string;
  labels: Record<string, string>;
  state: ProviderState;
  /** ISO 8601, or null when the provider does not say. */
  createdAt: string | null;
}

/** How a provider failure should be treated. */
export interface ProviderFailure {
  /** 5xx, 429, a network error, a timeout: the same call may succeed later. */
  retryable: boolean;
  /** The runtime (or whatever the call addressed) does not exist. */
  notFound: boolean;
  /** A name conflict on create (a concurrent acquire of the same key). */
  conflict: boolean;
  /** A message without credentials. */
  message: string;
}

export interface CloudProvider {
  /** The conformance table's driver name; also the `openma.driver` label. */
  readonly name: string;
  /** Whether its exec API can close a running command's stdin (see RemoteSandboxApi). */
  readonly stdinEof: boolean;
  /**
   * False when stdin can only be delivered whole, before the command starts
   * (Vercel spools it): the tool port then offers no long-lived process.
   * Absent means true.
   */
  readonly streamingStdin?: boolean;
  /**
   * The runtime a previous acquire with this stable name made, or null. By
   * name where the provider has names; by the acquire's labels otherwise.
   */
  find(input: { name: string; labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime | null>;
  create(input: { name: string; labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime>;
  /**
   * The id a create with this name makes, where the provider derives it from
   * the name rather than assigning one (the Cloudflare bridge). Lets a host
   * record the lease before the acquire, for a provider it cannot list.
   */
  idFor?(name: string): string;
  get(input: { id: string; signal: AbortSignal }): Promise<ProviderRuntime | null>;
  /** Every runtime carrying all of `labels`. */
  list(input: { labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime[]>;
  /** Brings a suspended runtime back; resolves once commands run. */
  resume(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void>;
  /** Suspends on request (pause, stop); a provider that sleeps on its own may do nothing. */
  suspend(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void>;
  /** Hard kill and delete; `not_found` when it was already gone. */
  destroy(input: { id: string; signal: AbortSignal }): Promise<"destroyed" | "not_found">;
  /** Renews the provider's own lease on a running runtime (E2B's timeout, Daytona's activity), if it has one. */
  renew(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void>;
  /** Commands and files of one running runtime. */
  api(input: { id: string; signal: AbortSignal }): Promise<RemoteSandboxApi>;
  describe(err: unknown): ProviderFailure;
  /** Releases SDK resources (connections, caches). */
  close(): Promise<void>;
}
