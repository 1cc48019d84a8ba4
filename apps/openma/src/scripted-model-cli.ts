/**
 * Run the scripted model on its own, for cross-process tests, agents in
 * sandboxes and the offline demo:
 *
 *   npx tsx apps/openma/src/scripted-model-cli.ts --script file.json --port 0
 *
 * One port serves every dialect (Anthropic Messages, OpenAI Responses and Chat
 * Completions, Gemini) from the same script. Prints its base URL as the first
 * stdout line (so a parent process can read it) and serves until
 * SIGINT/SIGTERM. The script can be replaced and faults queued at runtime over
 * `POST /_script` and `POST /_script/inject`.
 */
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { parseScript, ScriptError, startScriptedModel } from "@openma/scripted-model";

const USAGE = `usage: scripted-model-cli [--script file.json] [--port 0] [--host 127.0.0.1] [--api-key KEY]

  --script   JSON script (a list of turns or {turns, session_key, side_requests}); empty when omitted
  --port     port to listen on; 0 picks a free one (default 0)
  --host     interface to bind (default 127.0.0.1)
  --api-key  require this key, presented as each API does (x-api-key or Bearer;
             Bearer; x-goog-api-key or ?key=); also SCRIPTED_MODEL_API_KEY

Base URLs, given the printed URL U:
  Anthropic   U              (POST /v1/messages)
  OpenAI      U/v1           (POST /v1/responses, /v1/chat/completions)
  Gemini      U              (POST /v1beta/models/{model}:streamGenerateContent?alt=sse, ...)
`;

function parsePort(raw: string): number {
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65_535)
    throw new ScriptError(`--port must be an integer 0-65535, got ${JSON.stringify(raw)}`);
  return port;
}

async function main(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      script: { type: "string" },
      port: { type: "string", default: "0" },
      host: { type: "string", default: "127.0.0.1" },
      "api-key": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const script = values.script ? parseScript(JSON.parse(await readFile(values.script, "utf8"))) : [];
  const apiKey = values["api-key"] ?? process.env.SCRIPTED_MODEL_API_KEY;
  const model = await startScriptedModel({ script, port: parsePort(values.port), host: values.host, ...(apiKey ? { apiKey } : {}) });
  process.stdout.write(`${model.url}\n`);
  const stop = () => {
    model.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

function isUsageError(err: Error): boolean {
  const code = (err as { code?: unknown }).code;
  return err instanceof ScriptError || err instanceof SyntaxError || (typeof code === "string" && code.startsWith("ERR_PARSE_ARGS"));
}

main(process.argv.slice(2)).catch((err: Error) => {
  process.stderr.write(`scripted-model: ${err.message}\n${isUsageError(err) ? USAGE : ""}`);
  process.exit(2);
});
