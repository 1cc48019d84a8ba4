/**
 * Reads one built-in server tool's entry (`web_fetch`, `web_search`) from the
 * agent's `agent_toolset_20260401`: whether it is on and its own settings.
 * The permission gate lives in tools.ts; this is only what the executor
 * itself needs (domain lists, location, limits).
 */
import { z } from "zod";

const toolsetSchema = z.object({
  type: z.literal("agent_toolset_20260401"),
  default_config: z.object({ enabled: z.boolean().nullish() }).nullish(),
  configs: z.array(z.unknown()).nullish(),
});

export const domainList = z.array(z.string().min(1).max(253)).max(256);

/**
 * The tool's entry parsed by `schema` (null when the toolset has no entry for
 * it) and whether it is enabled; null when the agent has no toolset, or when
 * the entry cannot be read: a config we cannot read is not silently widened,
 * the tool stays off.
 */
export function toolsetToolConfig<T extends { enabled?: boolean | null | undefined }>(
  agent: unknown,
  name: string,
  schema: z.ZodType<T>,
): { enabled: boolean; config: T | null } | null {
  const tools = (agent as { tools?: unknown } | null)?.tools;
  if (!Array.isArray(tools)) return null;
  for (const tool of tools) {
    const toolset = toolsetSchema.safeParse(tool);
    if (!toolset.success) continue;
    const entry = (toolset.data.configs ?? []).find((c) => (c as { name?: unknown } | null)?.name === name);
    if (entry === undefined) return { enabled: toolset.data.default_config?.enabled ?? true, config: null };
    const parsed = schema.safeParse(entry);
    if (!parsed.success) return null;
    return { enabled: parsed.data.enabled ?? toolset.data.default_config?.enabled ?? true, config: parsed.data };
  }
  return null;
}
