/**
 * Credential egress as a port the host composes into a local driver: one
 * gateway per sandbox, opened when the sandbox is acquired. The driver makes
 * the gateway the sandbox's only way out (it hands it the connections
 * accepted on the proxy socket inside the sandbox) and puts the public parts
 * in the sandbox: the CA certificate to trust and the placeholder variables.
 * Secrets and the CA key stay with the gateway.
 */
import type { CredentialEgressCapabilities } from "./capabilities.ts";
import type { RuntimeResourceScope } from "./scope.ts";

/** A connected stream socket of the host's runtime (a `node:net` Socket under Node); the contract stays free of `node:` imports. */
export interface EgressSocket {
  destroy(): void;
}

export interface SandboxEgress {
  /** PEM of the sandbox's CA (public): intercepted HTTPS is served with certificates it signed. Null when nothing is intercepted. */
  caCertPem: string | null;
  /** Variables for every process in the sandbox: each credential's `secret_name` set to its placeholder. Never a secret. */
  env: Readonly<Record<string, string>>;
  /** A connection accepted on the proxy socket inside the sandbox. */
  accept(socket: EgressSocket): void;
  close(): void;
}

export interface CredentialEgressPort {
  readonly capabilities: CredentialEgressCapabilities;
  /** The gateway for one sandbox (`runtimeId` names it in audit events); fails when its policy cannot be resolved. */
  open(input: { scope: RuntimeResourceScope; runtimeId: string; signal: AbortSignal }): Promise<SandboxEgress>;
}
