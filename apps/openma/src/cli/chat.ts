/**
 * `openma chat`: an interactive loop on one session. Read a line, send it,
 * show the turn as it happens (with a spinner on a terminal); when the agent
 * waits for a tool confirmation (`always_ask`), ask y/n and send
 * `user.tool_confirmation`. Ctrl-C during a turn interrupts it (sends
 * `user.interrupt`) and chat goes on; a second Ctrl-C in that turn leaves.
 * Ctrl-C or Ctrl-D at the prompt leaves.
 */
import { createInterface } from "node:readline";
import type Anthropic from "@anthropic-ai/sdk";
import { followSession, isFinal, type SessionEvent } from "./follow.ts";
import { createSession, type Output, sendMessage } from "./resources.ts";
import { spinner } from "./spinner.ts";
import { printEvent } from "./tail.ts";

/** Lines from the terminal; null once it is closed (ctrl-d, ctrl-c, end of input). */
function prompter(out: Output) {
  const rl = createInterface({ input: out.io.stdin, output: out.io.stdout, terminal: out.io.stdout.isTTY === true });
  let closed = false;
  const waiting = new Set<(line: string | null) => void>();
  let onInterrupt: (() => void) | null = null;
  // Only a terminal delivers Ctrl-C here (readline holds it in raw mode); at a prompt it leaves.
  rl.on("SIGINT", () => (onInterrupt && waiting.size === 0 ? onInterrupt() : rl.close()));
  rl.on("close", () => {
    closed = true;
    for (const resolve of waiting) resolve(null);
    waiting.clear();
  });
  return {
    ask(question: string): Promise<string | null> {
      if (closed) return Promise.resolve(null);
      return new Promise((resolve) => {
        waiting.add(resolve);
        rl.question(question, (answer) => {
          waiting.delete(resolve);
          resolve(answer);
        });
      });
    },
    /** What Ctrl-C does while no question is asked (null: leave). */
    duringTurn(handler: (() => void) | null) {
      onInterrupt = handler;
    },
    close: () => rl.close(),
  };
}

export async function chatCommand(client: Anthropic, out: Output, flags: Record<string, string | undefined>): Promise<void> {
  const session = flags.session ? await client.beta.sessions.retrieve(flags.session) : await createSession(client, flags);
  // What the session already said is not shown again; chat starts from now.
  const before: string[] = [];
  for await (const e of client.beta.sessions.events.list(session.id, { limit: 1000 })) before.push(e.id);
  out.io.stdout.write(`${out.paint("dim", `session ${session.id} — ctrl-d to leave`)}\n`);

  const stop = new AbortController();
  const events = followSession(client, session.id, {
    skip: before,
    signal: stop.signal,
    onReconnect: (attempt) => out.io.stderr.write(out.paint("dim", `stream dropped, reconnecting (${attempt})…\n`)),
  });
  const terminal = prompter(out);
  const progress = spinner(out);
  const toolUses = new Map<string, SessionEvent & { name?: string; input?: unknown }>();

  /** Shows the turn until the session is idle and waiting for its user; false when it ended for good. */
  async function turn(): Promise<boolean> {
    for (;;) {
      const next = await events.next();
      if (next.done) return false;
      const e = next.value;
      progress.clear();
      if (e.type !== "user.message") printEvent(out, e);
      if (isFinal(e)) return false;
      if (e.type === "agent.tool_use" || e.type === "agent.mcp_tool_use" || e.type === "agent.custom_tool_use") toolUses.set(e.id, e);
      if (e.type !== "session.status_idle") continue;
      if (e.stop_reason.type !== "requires_action") return true;
      for (const id of e.stop_reason.event_ids) {
        const use = toolUses.get(id);
        if (use === undefined || use.type === "agent.custom_tool_use") {
          out.io.stdout.write(out.paint("yellow", `waiting on ${id}, which chat cannot answer (a custom tool)\n`));
          return true;
        }
        progress.stop();
        const answer = await terminal.ask(out.paint(["bold", "yellow"], `allow ${use.name} ${JSON.stringify(use.input)}? [y/N] `));
        if (answer === null) return false;
        const allow = /^y(es)?$/i.test(answer.trim());
        await client.beta.sessions.events.send(session.id, {
          events: [{ type: "user.tool_confirmation", tool_use_id: id, result: allow ? "allow" : "deny" }],
        });
        progress.start("working");
      }
    }
  }

  /** Ctrl-C in a turn: the first sends `user.interrupt`, the second ends the stream (and so chat). */
  function interrupter(): () => void {
    let interrupted = false;
    return () => {
      progress.clear();
      if (interrupted) {
        stop.abort();
        return;
      }
      interrupted = true;
      out.io.stdout.write(`${out.paint("yellow", "interrupting the turn (ctrl-c again to leave)")}\n`);
      progress.start("interrupting");
      client.beta.sessions.events.send(session.id, { events: [{ type: "user.interrupt" }] }).catch((err: unknown) => {
        out.io.stderr.write(`interrupt failed: ${err instanceof Error ? err.message : String(err)}\n`);
      });
    };
  }

  try {
    for (;;) {
      const line = await terminal.ask(out.paint("bold", "you> "));
      if (line === null) break;
      if (line.trim() === "") continue;
      await sendMessage(client, session.id, line);
      progress.start("working");
      terminal.duringTurn(interrupter());
      const goOn = await turn();
      terminal.duringTurn(null);
      progress.stop();
      if (!goOn) break;
    }
  } finally {
    progress.stop();
    terminal.close();
    stop.abort();
    await events.return(undefined);
  }
}
