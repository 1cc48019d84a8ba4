/**
 * `openma standin <vendor>`: runs a cloud vendor's stand-in on its own, so a
 * driver can be tried end to end without an account. It prints the
 * variables that point the vendor's SDK (and OpenMA's driver) at it, then
 * serves until interrupted, removing its sandboxes on the way out. Every
 * sandbox is a real local container (Docker and the sandbox images of
 * `npm run provision` are needed).
 *
 *   PORT       listen port (default 0: a free one)
 *   HOST       listen address (default 127.0.0.1)
 *   STANDIN_API_KEY  the credential it accepts (default: a fixed test value)
 */
import type { CloudStandIn } from "@openma/standin-kit";
import type { REMOTE_SANDBOX_DRIVERS } from "./remote-sandboxes.ts";

/** Every remote driver has a stand-in but litebox, whose runtime is embedded (there is no service to stand in for). */
const STARTERS: Record<
  Exclude<(typeof REMOTE_SANDBOX_DRIVERS)[number], "litebox">,
  (options: { port?: number; host?: string; apiKey?: string }) => Promise<CloudStandIn>
> = {
  e2b: async (o) => (await import("@openma/standin-e2b")).startE2BStandIn(o),
  daytona: async (o) => (await import("@openma/standin-daytona")).startDaytonaStandIn(o),
  sprites: async (o) => (await import("@openma/standin-sprites")).startSpritesStandIn(o),
  blaxel: async (o) => (await import("@openma/standin-blaxel")).startBlaxelStandIn(o),
  vercel: async (o) => (await import("@openma/standin-vercel")).startVercelStandIn(o),
  modal: async (o) => (await import("@openma/standin-modal")).startModalStandIn(o),
  superserve: async (o) => (await import("@openma/standin-superserve")).startSuperserveStandIn(o),
  boxrun: async (o) => (await import("@openma/standin-boxrun")).startBoxRunStandIn(o),
  "cloudflare-bridge": async (o) => (await import("@openma/standin-cloudflare-bridge")).startCloudflareBridgeStandIn(o),
  // The bridge routes plus our Worker's egress route; the egress is stored, not enforced (the real Worker's is, in workerd).
  cloudflare: async (o) => (await import("@openma/standin-cloudflare-bridge")).startCloudflareWorkerStandIn(o),
};

export const STANDIN_USAGE = `usage: openma standin <${Object.keys(STARTERS).join("|")}>  (PORT, HOST, STANDIN_API_KEY)`;

/** Starts the named stand-in; null when the name is not one. */
export async function startStandIn(vendor: string, env: NodeJS.ProcessEnv = process.env): Promise<CloudStandIn | null> {
  const start = STARTERS[vendor as keyof typeof STARTERS];
  if (start === undefined) return null;
  const port = env.PORT === undefined ? 0 : Number(env.PORT);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error("PORT must be a port number");
  return start({ port, host: env.HOST || undefined, apiKey: env.STANDIN_API_KEY || undefined });
}

/** What to export for the driver, and how to reach the admin surface. */
export function describeStandIn(standIn: CloudStandIn): string {
  const lines = [`${standIn.vendor} stand-in listening on ${standIn.url}`, "", "Point OpenMA (or the vendor's SDK) at it:", ""];
  lines.push(`  export OPENMA_SANDBOX=${standIn.vendor}`);
  for (const [name, value] of Object.entries(standIn.env)) lines.push(`  export ${name}=${value}`);
  lines.push("", "Admin (same key as a bearer token):");
  lines.push(`  GET  ${standIn.url}/_standin/state    live sandboxes and their containers`);
  lines.push(
    `  POST ${standIn.url}/_standin/faults   {"fault": {"op": "create|exec|files|kill|...", "kind": "status|rate_limited|hang|cut|vanish"}, "times": 1}`,
  );
  return `${lines.join("\n")}\n`;
}
