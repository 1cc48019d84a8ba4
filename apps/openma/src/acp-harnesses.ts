/** `openma doctor`'s ACP line: which agent releases are installed in the agent cache (sandboxes mount it read-only). */
import { agentCacheRoot, listInstalledAgentReleases } from "@openma/acp";
import type { DoctorCheck } from "./doctor.ts";

export async function checkAcpHarnesses(env: NodeJS.ProcessEnv): Promise<DoctorCheck> {
  const root = agentCacheRoot(env);
  const installed = await listInstalledAgentReleases(root);
  const names = installed.map((i) => `${i.release.package}@${i.release.version}`);
  return {
    id: "acp",
    status: installed.length > 0 ? "ok" : "skipped",
    detail: installed.length > 0 ? `ACP harnesses installed: ${names.join(", ")}` : `no ACP harness installed in ${root}`,
    disables: installed.length > 0 ? [] : ["ACP coding-agent harnesses (Codex, Gemini CLI, Claude Code, ...)"],
    hint: "install one with ensureAgentRelease (docs/acp.md); OPENMA_ACP_AGENT_CACHE moves the cache",
    facts: { cache: root, installed: names },
  };
}
