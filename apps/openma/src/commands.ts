/** The `openma` commands: serve (default), runtime-host, doctor, standin. Loaded by cli.ts once the Node version is checked. */
import { openStorage } from "@openma/storage";
import { CLIENT_USAGE, clientCommand } from "./cli/index.ts";
import { loadConfig } from "./config.ts";
import { doctorCommand } from "./doctor.ts";
import { startConfiguredRuntimeHost } from "./runtime-host.ts";
import { createLogger, openBlobStore, type StartOptions, startServer } from "./server.ts";
import { describeStandIn, STANDIN_USAGE, startStandIn } from "./standin.ts";

/** `openma serve`; `opts` only from code that runs it in-process (a test entry point injecting a clock). */
export async function serveCommand(opts: StartOptions = {}): Promise<void> {
  const config = loadConfig();
  const server = await startServer(config, opts);
  const backend = server.storage.dialect === "postgres" ? "PostgreSQL" : `SQLite in ${config.dataDir}`;
  process.stdout.write(`OpenMA listening on ${server.url} (storage: ${backend})\n`);
  if (server.generatedApiKey) {
    process.stdout.write(
      `Generated an admin API key (shown once, also stored in ${config.dataDir}/admin-api-key):\n  ${server.generatedApiKey}\n`,
    );
  }
  if (config.runtimeHost) process.stdout.write(`Serving self-hosted environment ${config.runtimeHost.environmentId} from this machine\n`);
  // Draining may take the whole drain deadline before the usual shutdown starts.
  stopOnSignals(() => server.drain(), config.ops.drainTimeoutMs);
}

/** `openma runtime-host`: serves one self-hosted environment against a running server's API and database. */
async function runtimeHostCommand(): Promise<void> {
  const config = loadConfig();
  if (!config.runtimeHost) {
    throw new Error("openma runtime-host needs OPENMA_RUNTIME_HOST_ENVIRONMENT_ID and ANTHROPIC_ENVIRONMENT_KEY (and OPENMA_API_URL)");
  }
  const logger = createLogger(config.logLevel);
  // The host's step spans (openma.host.run and its steps) go out when an OTLP endpoint is configured.
  const endpoint = config.ops.tracesEndpoint;
  const tracing = endpoint ? (await import("./tracing.ts")).startTracing(endpoint) : null;
  const storage = await openStorage({
    dataDir: config.dataDir,
    databaseUrl: config.databaseUrl,
    pgSchema: config.pgSchema,
    blobs: await openBlobStore(config),
    onBackgroundError: (err) => logger.warn({ err: err.message }, "storage background error"),
  });
  const host = await startConfiguredRuntimeHost({
    config: config.runtimeHost,
    apiUrl: config.runtimeHost.apiUrl,
    dataDir: config.dataDir,
    storage,
    logger,
  }).catch(async (err: unknown) => {
    await storage.close();
    throw err;
  });
  process.stdout.write(
    `OpenMA runtime host serving ${config.runtimeHost.environmentId} with ${host.driver} sandboxes (API ${config.runtimeHost.apiUrl})\n`,
  );
  stopOnSignals(async () => {
    await host.close();
    await storage.close();
    await tracing?.shutdown();
  });
}

/** `openma standin <vendor>`: a cloud vendor's stand-in on its own (see standin.ts). */
async function standInCommand(args: string[]): Promise<void> {
  const standIn = await startStandIn(args[0] ?? "");
  if (standIn === null) {
    process.stderr.write(`${STANDIN_USAGE}\n`);
    process.exitCode = 2;
    return;
  }
  process.stdout.write(describeStandIn(standIn));
  stopOnSignals(() => standIn.close());
}

/** SIGINT/SIGTERM: one graceful close, forced exit if it hangs. */
function stopOnSignals(close: () => Promise<void>, drainMs = 0): void {
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`received ${signal}, shutting down\n`);
    // Long enough for the runtime host to cancel its runs and hard-kill their sandboxes.
    const force = setTimeout(() => process.exit(1), drainMs + 30_000);
    force.unref();
    close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
}

const USAGE = `usage: openma <command>

commands:
  serve         run the API server (PORT, OPENMA_DATA_DIR, DATABASE_URL, OPENMA_API_KEY); with
                OPENMA_RUNTIME_HOST_ENVIRONMENT_ID + ANTHROPIC_ENVIRONMENT_KEY it also runs the runtime host
  runtime-host  serve a self-hosted environment's sessions in sandboxes (local, or OPENMA_SANDBOX=<cloud driver>)
                with the official worker
                (OPENMA_RUNTIME_HOST_ENVIRONMENT_ID, ANTHROPIC_ENVIRONMENT_KEY, OPENMA_API_URL, and the
                server's OPENMA_DATA_DIR / DATABASE_URL)
  doctor        report what this machine has (node, SQLite, Postgres, bwrap, Docker, images, cgroups,
                configured cloud sandbox drivers) [--json]
  standin       run a cloud vendor's stand-in (e2b, daytona, sprites, blaxel, vercel, modal, superserve) on its own, over local sandboxes

${CLIENT_USAGE}`;

export async function main(argv: string[]): Promise<void> {
  const [command = "serve", ...rest] = argv;
  switch (command) {
    case "serve":
      return serveCommand();
    case "runtime-host":
      return runtimeHostCommand();
    case "doctor":
      return doctorCommand(rest);
    case "standin":
      return standInCommand(rest);
    case "agents":
    case "environments":
    case "sessions":
    case "chat":
      return clientCommand(command, rest);
    case "help":
    case "--help":
    case "-h":
      process.stdout.write(USAGE);
      return;
    default:
      process.stderr.write(`unknown command: ${command}\n${USAGE}`);
      process.exitCode = 2;
  }
}
