/** `openma <command>`: serve (default), doctor. */
import { loadConfig } from "./config.ts";
import { doctorCommand } from "./doctor.ts";
import { startServer } from "./server.ts";

async function serveCommand(): Promise<void> {
  const config = loadConfig();
  const server = await startServer(config);
  const backend = server.storage.dialect === "postgres" ? "PostgreSQL" : `SQLite in ${config.dataDir}`;
  process.stdout.write(`OpenMA listening on ${server.url} (storage: ${backend})\n`);
  if (server.generatedApiKey) {
    process.stdout.write(
      `Generated an admin API key (shown once, also stored in ${config.dataDir}/admin-api-key):\n  ${server.generatedApiKey}\n`,
    );
  }
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`received ${signal}, shutting down\n`);
    const force = setTimeout(() => process.exit(1), 10_000);
    force.unref();
    server.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
}

const USAGE = `usage: openma <command>

commands:
  serve     run the API server (PORT, OPENMA_DATA_DIR, DATABASE_URL, OPENMA_API_KEY)
  doctor    report what this machine has (node, SQLite, Postgres, bwrap, Docker, images, cgroups) [--json]
`;

async function main(argv: string[]): Promise<void> {
  const [command = "serve", ...rest] = argv;
  switch (command) {
    case "serve":
      return serveCommand();
    case "doctor":
      return doctorCommand(rest);
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

main(process.argv.slice(2)).catch((err: Error) => {
  process.stderr.write(`openma: ${err.message}\n`);
  process.exit(1);
});
