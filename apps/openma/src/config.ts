/** Server configuration from the environment, validated once at start-up. */
import { resolve } from "node:path";
import { z } from "zod";

const schema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8787),
  HOST: z.string().default("127.0.0.1"),
  OPENMA_DATA_DIR: z.string().default("./.openma"),
  DATABASE_URL: z.string().optional(),
  // Postgres schema to create and use (several processes sharing one isolated test database).
  OPENMA_PG_SCHEMA: z
    .string()
    .regex(/^[a-z_][a-z0-9_]*$/, "OPENMA_PG_SCHEMA must be a lower-case identifier")
    .optional(),
  OPENMA_API_KEY: z.string().min(16, "OPENMA_API_KEY must be at least 16 characters").optional(),
  OPENMA_PUBLIC_URL: z.url().optional(),
  OPENMA_WORK_TTL_SECONDS: z.coerce.number().int().min(2).max(3600).default(120),
  OPENMA_SSE_KEEPALIVE_MS: z.coerce.number().int().min(100).default(15_000),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
});

export interface ServerConfig {
  port: number;
  host: string;
  dataDir: string;
  databaseUrl: string | undefined;
  pgSchema: string | undefined;
  apiKey: string | undefined;
  publicUrl: string | undefined;
  workTtlSeconds: number;
  sseKeepAliveMs: number;
  logLevel: string;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const parsed = schema.safeParse(Object.fromEntries(Object.entries(env).filter(([, v]) => v !== "")));
  if (!parsed.success) {
    const msg = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
    throw new Error(`invalid configuration: ${msg}`);
  }
  const e = parsed.data;
  return {
    port: e.PORT,
    host: e.HOST,
    dataDir: resolve(e.OPENMA_DATA_DIR),
    databaseUrl: e.DATABASE_URL,
    pgSchema: e.OPENMA_PG_SCHEMA,
    apiKey: e.OPENMA_API_KEY,
    publicUrl: e.OPENMA_PUBLIC_URL,
    workTtlSeconds: e.OPENMA_WORK_TTL_SECONDS,
    sseKeepAliveMs: e.OPENMA_SSE_KEEPALIVE_MS,
    logLevel: e.LOG_LEVEL,
  };
}
