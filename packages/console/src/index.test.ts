import { DRIVER_CONFORMANCE } from "@openma/contract/conformance";
import { planned, unbuilt } from "@openma/contract/conformance/rows";
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { conformanceRows } from "./conformance.ts";
import { consoleRoutes, mountConsole } from "./index.ts";

const app = consoleRoutes();
const get = (path: string) => app.request(path);

describe("consoleRoutes", () => {
  it("serves the page, whose import map names the vendored UI library", async () => {
    const res = await get("/");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    const page = await res.text();
    for (const path of ["/console/vendor/preact.js", "/console/vendor/hooks.js", "/console/vendor/htm.js", "/console/app.js"]) {
      expect(page).toContain(path);
    }
  });

  it("serves its modules and the UI library's ES module builds as JavaScript", async () => {
    for (const path of [
      "/agent.js",
      "/app.js",
      "/api.js",
      "/events.js",
      "/html.js",
      "/pages.js",
      "/session.js",
      "/timeline.js",
      "/workspace.js",
      "/vaults.js",
    ]) {
      const res = await get(path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    }
    expect(await (await get("/vendor/preact.js")).text()).toContain("as render");
    expect(await (await get("/vendor/hooks.js")).text()).toContain('from"preact"');
    expect(await (await get("/vendor/htm.js")).text()).toContain("export default");
    expect((await get("/styles.css")).headers.get("content-type")).toBe("text/css; charset=utf-8");
  });

  it("answers 404 for any name not on its list, paths that climb out included", async () => {
    for (const path of [
      "/nope.js",
      "/vendor/react.js",
      "/../package.json",
      "/%2e%2e%2fpackage.json",
      "/vendor/..%2f..%2fpackage.json",
      "/index.ts",
    ]) {
      expect((await get(path)).status, path).toBe(404);
    }
  });

  it("serves the driver conformance table, one row per driver", async () => {
    const res = await get("/conformance.json");
    expect(res.headers.get("content-type")).toBe("application/json");
    const body = (await res.json()) as { data: Array<{ driver: string; status: string }> };
    expect(body.data.map((row) => row.driver)).toEqual(DRIVER_CONFORMANCE.map((entry) => entry.driver));
    expect(body.data.find((row) => row.driver === "bubblewrap")).toMatchObject({ status: "implemented" });
  });

  it("shows what an unbuilt driver is planned to offer, and marks test-only drivers", () => {
    // Every seed driver has a built row now: a synthetic one stands for the next driver planned.
    const plan = planned("next-driver", {
      lanes: ["ama_worker"],
      suspend: false,
      workspace: [{ strategy: "ephemeral", durability: "none" }],
      outputs: [],
      credentialEgress: { enforcement: "unsupported" },
      sandboxPortFacts: { has: [], lacks: [] },
    });
    const table = [...DRIVER_CONFORMANCE, unbuilt("next-driver", "vm", "a planned driver", plan)];
    const testOnly = DRIVER_CONFORMANCE.find((entry) => entry.testOnly);
    const rows = conformanceRows(table);
    expect(rows.find((r) => r.driver === "next-driver")).toMatchObject({ status: "not implemented", lanes: ["ama_worker"] });
    expect(testOnly).toBeDefined();
    expect(rows.find((r) => r.driver === testOnly?.driver)?.status).toBe("implemented (test only)");
  });

  it("mounts at /console, with the root URL and /console/ redirecting there", async () => {
    const server = new Hono();
    mountConsole(server);
    for (const path of ["/", "/console/"]) {
      const res = await server.request(path);
      expect(res.status, path).toBe(302);
      expect(res.headers.get("location")).toBe("/console");
    }
    expect((await server.request("/console")).status).toBe(200);
    expect((await server.request("/console/app.js")).status).toBe(200);
  });
});
