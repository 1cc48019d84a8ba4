/** The client commands (`openma agents|environments|sessions|chat`): flags parsed here, work done in the files beside. */
import { parseArgs } from "node:util";
import { chatCommand } from "./chat.ts";
import { type CliIo, connect, GLOBAL_FLAGS, processIo, UsageError } from "./client.ts";
import {
  agentsCommand,
  createSession,
  environmentsCommand,
  need,
  type Output,
  printCreated,
  sendMessage,
  sessionsListCommand,
} from "./resources.ts";
import { painter } from "./style.ts";
import { tailCommand } from "./tail.ts";

export const CLIENT_USAGE = `client commands (against any server: --base-url or OPENMA_BASE_URL / ANTHROPIC_BASE_URL, default
http://127.0.0.1:8787; the key from OPENMA_API_KEY / ANTHROPIC_API_KEY or --api-key-file <path>; --json for scripts):
  agents list | create --name N --model M [--system S] [--tools always_allow|always_ask|none]
  environments list | create --name N [--type cloud|self_hosted]
  sessions list | create --agent A --environment E [--title T] | send <session> <text>
           | tail <session> [--until-idle]   the log so far, then live events (NDJSON with --json)
  chat [--session S | --agent A --environment E]   an interactive session, with tool confirmation prompts
`;

const FLAGS = {
  ...GLOBAL_FLAGS,
  name: { type: "string" },
  model: { type: "string" },
  system: { type: "string" },
  tools: { type: "string" },
  type: { type: "string" },
  agent: { type: "string" },
  environment: { type: "string" },
  title: { type: "string" },
  session: { type: "string" },
  limit: { type: "string" },
  "until-idle": { type: "boolean" },
} as const;

export async function clientCommand(command: string, argv: string[], io: CliIo = processIo()): Promise<void> {
  try {
    const { values, positionals } = parseArgs({ args: argv, options: FLAGS, allowPositionals: true, strict: true });
    const client = connect(values, io.env);
    const out: Output = { io, json: values.json === true, paint: painter(io) };
    const strings = values as Record<string, string | undefined>;
    const [verb = "", ...rest] = positionals;
    switch (command) {
      case "agents":
        return await agentsCommand(client, out, verb, strings);
      case "environments":
        return await environmentsCommand(client, out, verb, strings);
      case "chat":
        return await chatCommand(client, out, strings);
      case "sessions":
        if (verb === "list") return await sessionsListCommand(client, out, strings);
        if (verb === "create") return printCreated(out, "session", await createSession(client, strings));
        if (verb === "send") {
          const text = rest.slice(1).join(" ");
          await sendMessage(client, need(rest[0], "session (first argument)"), need(text, "text (after the session)"));
          if (!out.json) io.stdout.write("sent\n");
          else io.stdout.write(`${JSON.stringify({ sent: true })}\n`);
          return;
        }
        if (verb === "tail")
          return await tailCommand(client, out, need(rest[0], "session (first argument)"), values["until-idle"] === true);
        throw new UsageError(`unknown sessions command: ${verb} (list, create, send, tail)`);
    }
    throw new UsageError(`unknown command: ${command}`);
  } catch (err) {
    if (err instanceof UsageError || (err as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")) {
      io.stderr.write(`openma ${command}: ${(err as Error).message}\n${CLIENT_USAGE}`);
      process.exitCode = 2;
      return;
    }
    throw err;
  }
}
