/**
 * An agent's `multiagent` configuration: the request forms the SDK sends
 * (`coordinator` and `multiagent_20261001`) and their resolution into the
 * stored/response form, where every roster entry is a concrete
 * `{type:"agent", id, version}` reference (or an advisor model) and every
 * `multiagent_20261001` member is spelled out with its defaults.
 *
 * Resolution needs the agents the roster names, so it takes a lookup port
 * instead of a database: the route passes one reading inside its
 * transaction, the unit test a map.
 */
import { z } from "zod";

const agentId = z.string().min(1).max(128);
const modelId = z.string().min(1).max(256);

const agentRefParam = z.object({
  type: z.literal("agent"),
  id: agentId,
  version: z
    .number()
    .int()
    .min(1)
    .max(2 ** 31 - 1)
    .optional(),
});
const selfParam = z.object({ type: z.literal("self") });
const advisorRosterParam = z.object({ type: z.literal("advisor"), model: modelId });
/** A `predefined_agents` entry: an id string, an agent reference, or `self`. */
const predefinedParam = z.union([agentId, z.discriminatedUnion("type", [agentRefParam, selfParam])]);
/** A coordinator roster entry: a predefined entry or an advisor model. */
const rosterParam = z.union([agentId, z.discriminatedUnion("type", [agentRefParam, selfParam, advisorRosterParam])]);

const disabled = z.object({ type: z.literal("disabled") });
const inlineAgentsParam = z.discriminatedUnion("type", [z.object({ type: z.literal("enabled") }), disabled]);
const MAX_ROSTER = 20;
const spawnParam = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("enabled"),
    inline_agents: inlineAgentsParam.nullish(),
    predefined_agents: z.array(predefinedParam).max(MAX_ROSTER).nullish(),
  }),
  disabled,
]);

const coordinatorParam = z.object({ type: z.literal("coordinator"), agents: z.array(rosterParam).min(1).max(MAX_ROSTER) });
const multiagent20261001Param = z.object({
  type: z.literal("multiagent_20261001"),
  advisor: z.discriminatedUnion("type", [z.object({ type: z.literal("enabled"), model: modelId }), disabled]).nullish(),
  subagents: spawnParam.nullish(),
  workflows: spawnParam.nullish(),
});

export const multiagentParam = z.discriminatedUnion("type", [coordinatorParam, multiagent20261001Param]);
export type MultiagentParam = z.infer<typeof multiagentParam>;

export interface AgentReference {
  type: "agent";
  id: string;
  version: number;
}
type Toggle = { type: "enabled" } | { type: "disabled" };
export type SpawnConfig = { type: "enabled"; inline_agents: Toggle; predefined_agents: AgentReference[] } | { type: "disabled" };
export type Multiagent =
  | { type: "coordinator"; agents: Array<AgentReference | { type: "advisor"; model: string }> }
  | {
      type: "multiagent_20261001";
      advisor: { type: "enabled"; model: string } | { type: "disabled" };
      subagents: SpawnConfig;
      workflows: SpawnConfig;
    };

/** What resolution needs to know about a named agent (null: there is no such agent or version). */
export interface RosterAgent {
  id: string;
  version: number;
  archived: boolean;
  multiagent: unknown;
}
export interface RosterLookup {
  /** The agent at `version`, or its latest version when `version` is undefined. */
  find(id: string, version: number | undefined): Promise<RosterAgent | null>;
  /** The agent that owns the configuration (what `self` names), at the version being written. */
  self: AgentReference;
}

/** A rule the configuration breaks, with the field path it names (becomes a 400 `invalid_request_error`). */
export class MultiagentProblem extends Error {}

async function resolveEntry(
  entry: z.infer<typeof predefinedParam>,
  where: string,
  lookup: RosterLookup,
  seen: Set<string>,
  selves: { n: number },
): Promise<AgentReference> {
  let ref: AgentReference;
  const named = typeof entry === "string" ? entry : entry.type === "agent" ? entry.id : null;
  // The owner named by its own id is `self` spelled out (it may not exist yet, on create).
  if (named === null || named === lookup.self.id) {
    if (++selves.n > 1) throw new MultiagentProblem(`${where}: at most one self entry`);
    ref = lookup.self;
  } else {
    const id = named;
    const version = typeof entry === "string" || entry.type !== "agent" ? undefined : entry.version;
    const agent = await lookup.find(id, version);
    if (!agent) throw new MultiagentProblem(`${where}: agent ${id}${version ? ` version ${version}` : ""} was not found`);
    if (agent.archived) throw new MultiagentProblem(`${where}: agent ${id} is archived`);
    // Depth limit 1: a roster agent runs as a thread and cannot orchestrate threads of its own.
    if (agent.multiagent) throw new MultiagentProblem(`${where}: agent ${id} has multiagent set itself (the depth limit is 1)`);
    ref = { type: "agent", id: agent.id, version: agent.version };
  }
  if (seen.has(ref.id)) throw new MultiagentProblem(`${where}: agent ${ref.id} is listed twice`);
  seen.add(ref.id);
  return ref;
}

async function resolveList(
  entries: readonly z.infer<typeof predefinedParam>[],
  where: string,
  lookup: RosterLookup,
): Promise<AgentReference[]> {
  const seen = new Set<string>();
  const selves = { n: 0 };
  const out: AgentReference[] = [];
  for (const [i, entry] of entries.entries()) out.push(await resolveEntry(entry, `${where}[${i}]`, lookup, seen, selves));
  return out;
}

type SpawnParam = z.infer<typeof spawnParam>;
const ENABLED: Toggle = { type: "enabled" };

/**
 * One `subagents`/`workflows` member after the update merge: omitted keeps
 * the stored value, null takes the default (enabled, inline agents enabled,
 * no predefined agents), an object of the stored type is merged key by key,
 * an object of another type replaces it.
 */
async function resolveSpawn(
  param: SpawnParam | null | undefined,
  stored: SpawnConfig | undefined,
  where: string,
  lookup: RosterLookup,
): Promise<SpawnConfig> {
  if (param === undefined && stored) return stored;
  if (param?.type === "disabled") return { type: "disabled" };
  const base = stored?.type === "enabled" && param ? stored : undefined;
  const inline = param?.inline_agents === undefined ? (base?.inline_agents ?? ENABLED) : (param.inline_agents ?? ENABLED);
  const predefined =
    param?.predefined_agents === undefined
      ? (base?.predefined_agents ?? [])
      : await resolveList(param.predefined_agents ?? [], `${where}.predefined_agents`, lookup);
  if (inline.type === "disabled" && predefined.length === 0)
    throw new MultiagentProblem(`${where}: with inline_agents disabled, predefined_agents must name at least one agent`);
  return { type: "enabled", inline_agents: inline, predefined_agents: predefined };
}

/**
 * The stored form of `param`; `stored` is the agent's current configuration
 * on an update (a `multiagent_20261001` update merges into a stored one of
 * the same type, level by level, as the SDK documents).
 */
export async function resolveMultiagent(param: MultiagentParam, stored: unknown, lookup: RosterLookup): Promise<Multiagent> {
  if (param.type === "coordinator") {
    const seen = new Set<string>();
    const selves = { n: 0 };
    const agents: Extract<Multiagent, { type: "coordinator" }>["agents"] = [];
    for (const [i, entry] of param.agents.entries()) {
      if (typeof entry !== "string" && entry.type === "advisor") agents.push({ type: "advisor", model: entry.model });
      else agents.push(await resolveEntry(entry, `multiagent.agents[${i}]`, lookup, seen, selves));
    }
    return { type: "coordinator", agents };
  }
  const prior =
    (stored as Multiagent | null)?.type === "multiagent_20261001" ? (stored as Extract<Multiagent, { type: "multiagent_20261001" }>) : null;
  const advisor =
    param.advisor === undefined
      ? (prior?.advisor ?? { type: "disabled" as const })
      : param.advisor === null || param.advisor.type === "disabled"
        ? { type: "disabled" as const }
        : { type: "enabled" as const, model: param.advisor.model };
  return {
    type: "multiagent_20261001",
    advisor,
    subagents: await resolveSpawn(param.subagents, prior?.subagents, "multiagent.subagents", lookup),
    workflows: await resolveSpawn(param.workflows, prior?.workflows, "multiagent.workflows", lookup),
  };
}
