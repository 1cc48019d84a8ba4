/** `openma agents|environments|sessions <verb>`: list and create over the official SDK; a table for people, JSON with --json. */
import type Anthropic from "@anthropic-ai/sdk";
import type { CliIo } from "./client.ts";
import { UsageError } from "./client.ts";
import type { Paint } from "./style.ts";

export interface Output {
  io: CliIo;
  json: boolean;
  paint: Paint;
}

/** Rows as aligned columns (people) or one JSON document (scripts). */
export function printList<T>(out: Output, items: T[], columns: Array<[string, (item: T) => unknown]>): void {
  if (out.json) {
    out.io.stdout.write(`${JSON.stringify(items)}\n`);
    return;
  }
  if (items.length === 0) {
    out.io.stdout.write(out.paint("dim", "(none)\n"));
    return;
  }
  const cells = items.map((item) => columns.map(([, cell]) => String(cell(item) ?? "")));
  const widths = columns.map(([title], i) => Math.max(title.length, ...cells.map((row) => row[i]?.length ?? 0)));
  const line = (row: string[]) =>
    row
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join("  ")
      .trimEnd();
  out.io.stdout.write(`${out.paint("bold", line(columns.map(([title]) => title)))}\n`);
  for (const row of cells) out.io.stdout.write(`${line(row)}\n`);
}

/** A created resource: its id for people, the whole object for scripts. */
export function printCreated(out: Output, kind: string, created: { id: string }): void {
  out.io.stdout.write(out.json ? `${JSON.stringify(created)}\n` : `created ${kind} ${out.paint("bold", created.id)}\n`);
}

async function all<T>(page: AsyncIterable<T>, limit: number): Promise<T[]> {
  const items: T[] = [];
  for await (const item of page) {
    items.push(item);
    if (items.length >= limit) break;
  }
  return items;
}

export function need(value: string | undefined, flag: string): string {
  if (value === undefined || value === "") throw new UsageError(`missing --${flag}`);
  return value;
}

const TOOL_POLICIES = ["always_ask", "always_allow", "none"] as const;

export async function agentsCommand(client: Anthropic, out: Output, verb: string, flags: Record<string, string | undefined>) {
  if (verb === "list") {
    const agents = await all(client.beta.agents.list({ limit: 100 }), Number(flags.limit ?? 100));
    printList(out, agents, [
      ["ID", (a) => a.id],
      ["NAME", (a) => a.name],
      ["MODEL", (a) => (typeof a.model === "string" ? a.model : a.model.id)],
      ["VERSION", (a) => a.version],
    ]);
    return;
  }
  if (verb === "create") {
    const tools = flags.tools ?? "always_allow";
    if (!(TOOL_POLICIES as readonly string[]).includes(tools)) throw new UsageError(`--tools must be one of ${TOOL_POLICIES.join(", ")}`);
    const created = await client.beta.agents.create({
      name: need(flags.name, "name"),
      model: need(flags.model, "model"),
      ...(flags.system ? { system: flags.system } : {}),
      tools:
        tools === "none"
          ? []
          : [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: tools as "always_ask" | "always_allow" } } }],
    });
    printCreated(out, "agent", created);
    return;
  }
  throw new UsageError(`unknown agents command: ${verb} (list, create)`);
}

export async function environmentsCommand(client: Anthropic, out: Output, verb: string, flags: Record<string, string | undefined>) {
  if (verb === "list") {
    const environments = await all(client.beta.environments.list({ limit: 100 }), Number(flags.limit ?? 100));
    printList(out, environments, [
      ["ID", (e) => e.id],
      ["NAME", (e) => e.name],
      ["TYPE", (e) => e.config.type],
    ]);
    return;
  }
  if (verb === "create") {
    const type = flags.type ?? "cloud";
    if (type !== "cloud" && type !== "self_hosted") throw new UsageError("--type must be cloud or self_hosted");
    const created = await client.beta.environments.create({ name: need(flags.name, "name"), config: { type } as never });
    printCreated(out, "environment", created);
    return;
  }
  throw new UsageError(`unknown environments command: ${verb} (list, create)`);
}

export async function createSession(client: Anthropic, flags: Record<string, string | undefined>) {
  return client.beta.sessions.create({
    agent: need(flags.agent, "agent"),
    environment_id: need(flags.environment, "environment"),
    ...(flags.title ? { title: flags.title } : {}),
  });
}

export async function sendMessage(client: Anthropic, sessionId: string, text: string) {
  return client.beta.sessions.events.send(sessionId, { events: [{ type: "user.message", content: [{ type: "text", text }] }] });
}

export async function sessionsListCommand(client: Anthropic, out: Output, flags: Record<string, string | undefined>) {
  const sessions = await all(client.beta.sessions.list({ limit: 100 }), Number(flags.limit ?? 100));
  printList(out, sessions, [
    ["ID", (s) => s.id],
    ["STATUS", (s) => s.status],
    ["TITLE", (s) => s.title ?? ""],
    ["AGENT", (s) => s.agent.id],
    ["CREATED", (s) => s.created_at],
  ]);
}
