/** Pure session helpers: mount paths and update planning. */
import { describe, expect, it } from "vitest";
import { ApiError } from "../errors.ts";
import { defaultRepoMountPath, memoryMountPath, planUpdate, type Session } from "./session.ts";

const session = (over: Partial<Session> = {}): Session => ({
  type: "session",
  id: "sesn_1",
  status: "idle",
  agent: {
    type: "agent",
    id: "agent_1",
    version: 1,
    name: "a",
    description: null,
    system: null,
    model: { id: "m" },
    tools: [],
    skills: [],
    mcp_servers: [],
    multiagent: null,
    execution_identity: { type: "service_account" },
  },
  environment_id: "env_1",
  title: null,
  metadata: {},
  resources: [],
  vault_ids: [],
  budget: null,
  usage: {},
  stats: {},
  outcome_evaluations: [],
  created_at: "2026-01-01T00:00:00.000Z",
  updated_at: "2026-01-01T00:00:00.000Z",
  archived_at: null,
  deployment_id: null,
  ...over,
});

describe("memory mount paths", () => {
  it("lower-cases the name and replaces each run of non-alphanumerics with one dash", () => {
    expect(memoryMountPath("User Preferences")).toBe("/mnt/memory/user-preferences");
    expect(memoryMountPath("a  --  b!")).toBe("/mnt/memory/a-b-");
    expect(memoryMountPath("Café Notes")).toBe("/mnt/memory/caf-notes");
  });

  it("never hands out a path twice", () => {
    const taken = new Set(["/mnt/memory/notes", "/mnt/memory/notes-2"]);
    expect(memoryMountPath("Notes", taken)).toBe("/mnt/memory/notes-3");
  });
});

describe("repository mount paths", () => {
  it("defaults to /workspace/<repo-name> without .git", () => {
    expect(defaultRepoMountPath("https://github.com/acme/widgets.git")).toBe("/workspace/widgets");
    expect(defaultRepoMountPath("https://github.com/acme/widgets/")).toBe("/workspace/widgets");
    expect(defaultRepoMountPath("https://github.com")).toBe("/workspace/repo");
  });
});

describe("planUpdate", () => {
  it("reports only changed fields, metadata only when non-empty", () => {
    const current = session({ title: "t", metadata: { a: "1" } });
    expect(planUpdate(current, { title: "t", metadata: { a: "1" } }, undefined)).toMatchObject({ modified: false, changed: {} });
    const cleared = planUpdate(current, { metadata: null }, undefined);
    expect(cleared).toMatchObject({ modified: true, changed: {} });
    expect(cleared.next.metadata).toEqual({});
    expect(planUpdate(current, { title: null }, undefined).changed).toEqual({ title: null });
    expect(planUpdate(current, {}, ["vlt_1"])).toMatchObject({ modified: true, changed: {} });
  });

  it("refuses adding a budget, and changing the agent of a running session", () => {
    const budget = { type: "limit" as const, max_list_cost: { amount: "1", currency: "USD" as const } };
    const refusal = (fn: () => unknown) => {
      try {
        fn();
      } catch (err) {
        return err as ApiError;
      }
      throw new Error("expected a refusal");
    };
    expect(refusal(() => planUpdate(session(), { budget }, undefined)).details?.error_code).toBe("budget_create_only");
    expect(planUpdate(session({ budget }), { budget: null }, undefined).changed).toEqual({ budget: null });
    const running = refusal(() => planUpdate(session({ status: "running" }), { agent: { tools: [] } }, undefined));
    expect(running).toBeInstanceOf(ApiError);
    expect(running.status).toBe(400);
  });
});
