/**
 * Starts the real server (real HTTP, real storage backend) for a test and
 * hands back an official SDK client pointed at it by `baseURL` only.
 */
import Anthropic from "@anthropic-ai/sdk";
import { silentLogger } from "@openma/api";
import type { Clock, Dialect, SecretBox } from "@openma/storage";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { loadConfig } from "../../apps/openma/src/config.ts";
import { loadSecretKeys } from "../../apps/openma/src/secret-key.ts";
import { type RunningServer, startServer } from "../../apps/openma/src/server.ts";

export const TEST_API_KEY = "sk-ant-api03-test-admin-key-0123456789";

export interface TestServer {
  server: RunningServer;
  store: TestStorage;
  baseURL: string;
  apiKey: string;
  client: Anthropic;
  /** A client with another credential (environment key, sessions token). */
  clientWith(authToken: string): Anthropic;
  /** The server's vault secret key (what seals `vault_credentials.secret`). */
  secrets: SecretBox;
  close(): Promise<void>;
}

export interface TestServerOptions {
  /** The server's clock (default: the system clock). */
  clock?: Clock;
}

export async function startTestServer(
  dialect: Dialect,
  env: Record<string, string> = {},
  opts: TestServerOptions = {},
): Promise<TestServer> {
  const store = await openTestStorage(dialect);
  // The brain is off unless a test asks for it (`OPENMA_BRAIN: "on"`): tests drive turns themselves.
  const config = loadConfig({
    PORT: "0",
    OPENMA_DATA_DIR: store.dataDir,
    OPENMA_API_KEY: TEST_API_KEY,
    LOG_LEVEL: "silent",
    OPENMA_BRAIN: "off",
    // Tests never install packages as a side effect (test/e2e/first-start-provision.test.ts asks for it).
    OPENMA_AUTO_PROVISION: "off",
    ...env,
  });
  const server = await startServer(config, {
    storage: store.storage,
    logger: silentLogger,
    ...(opts.clock ? { deps: { clock: opts.clock } } : {}),
  });
  const baseURL = server.url;
  const clientWith = (authToken: string) => new Anthropic({ baseURL, apiKey: null, authToken, maxRetries: 0 });
  return {
    server,
    store,
    baseURL,
    apiKey: TEST_API_KEY,
    client: new Anthropic({ baseURL, apiKey: TEST_API_KEY, maxRetries: 0 }),
    clientWith,
    secrets: loadSecretKeys(config.dataDir, config.secretKeys).box,
    async close() {
      await server.close();
      await store.cleanup();
    },
  };
}
