/**
 * `openma doctor` against this machine (provisioned by `npm run provision`)
 * and against deliberately missing parts.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { checkNode, type DoctorCheck, runDoctor, summarize } from "./doctor.ts";

const CLI = join(import.meta.dirname, "cli.ts");
const TSX = join(import.meta.dirname, "../../../node_modules/.bin/tsx");

function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(TSX, [CLI, ...args], { env: { ...process.env, ...env }, timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

const fake = (id: DoctorCheck["id"], status: DoctorCheck["status"], facts: DoctorCheck["facts"] = {}): DoctorCheck => ({
  id,
  status,
  detail: "",
  disables: [],
  facts,
});

describe("openma doctor", () => {
  it("finds everything the provisioned machine has and says the embedded default can run", async () => {
    const report = await runDoctor({ env: {} });
    const status = Object.fromEntries(report.checks.map((c) => [c.id, c.status]));
    expect(status).toMatchObject({ node: "ok", sqlite: "ok", postgres: "skipped", bubblewrap: "ok", docker: "ok", images: "ok" });
    expect(report.embeddedDefault).toMatchObject({ runnable: true, sandbox: "bubblewrap" });
    const docker = report.checks.find((c) => c.id === "docker");
    expect(docker?.facts.storageDriver).toMatch(/^(overlay2|vfs)$/);
    expect(docker?.facts.serverVersion).toBeTruthy();
    const bwrap = report.checks.find((c) => c.id === "bubblewrap");
    expect(bwrap?.facts).toMatchObject({ userNamespaces: true, networkNamespaces: true });
    expect(report.checks.find((c) => c.id === "cgroups")?.facts.version).toMatch(/^(v1|v2|hybrid)$/);
    // The host runs the project's Node 24, and so do the sandboxes: run inside the rootfs, and the image's label.
    expect(report.checks.find((c) => c.id === "node")?.facts).toMatchObject({ version: process.versions.node, execPath: process.execPath });
    expect(Number(process.versions.node.split(".")[0])).toBeGreaterThanOrEqual(24);
    const images = report.checks.find((c) => c.id === "images");
    expect(images?.facts).toMatchObject({ rootfsNode: process.version, imageNode: process.version });
    expect(images?.detail).toContain(`sandbox node ${process.version}`);
  });

  it("refuses a Node older than 24 with a message naming the fix", () => {
    const old = checkNode("20.20.2", "/usr/bin/node");
    expect(old.status).toBe("missing");
    expect(old.detail).toBe("v20.20.2 (/usr/bin/node) is too old (need >= 24)");
    expect(old.hint).toContain("npm start");
    expect(summarize([old, fake("sqlite", "ok"), fake("bubblewrap", "ok")]).embeddedDefault.reason).toBe(
      "Node.js 24+ and SQLite are required",
    );
  });

  it("names what a missing engine and missing images disable, and how to fix it", async () => {
    const report = await runDoctor({ env: {}, dockerSocket: "/nonexistent/docker.sock", imageManifest: "/nonexistent/images.json" });
    const docker = report.checks.find((c) => c.id === "docker");
    expect(docker?.status).toBe("missing");
    expect(docker?.disables.join(" ")).toContain("node-docker");
    expect(docker?.hint).toContain("npm run provision");
    const images = report.checks.find((c) => c.id === "images");
    expect(images?.status).toBe("missing");
    expect(images?.hint).toContain("npm run provision");
    // bubblewrap still carries the embedded default.
    expect(report.embeddedDefault).toMatchObject({ runnable: true, sandbox: "bubblewrap" });
  });

  it("checks PostgreSQL only when DATABASE_URL is set, and never prints the URL", async () => {
    const reachable = await runDoctor({ env: { DATABASE_URL: "postgres://postgres@127.0.0.1:5432/test" } });
    expect(reachable.checks.find((c) => c.id === "postgres")).toMatchObject({ status: "ok" });
    const url = "postgres://someone:hunter2-secret@127.0.0.1:1/test";
    const unreachable = await runDoctor({ env: { DATABASE_URL: url }, timeoutMs: 2_000 });
    const pg = unreachable.checks.find((c) => c.id === "postgres");
    expect(pg?.status).toBe("warn");
    expect(JSON.stringify(unreachable)).not.toContain("hunter2-secret");
    // Postgres is not part of the embedded default.
    expect(unreachable.ok).toBe(true);
  });

  it("falls back to Docker without bubblewrap and fails closed without either", () => {
    const base = [fake("node", "ok"), fake("sqlite", "ok")];
    const imagesLoaded = fake("images", "ok", { baseImage: "openma/sandbox-base:x", loaded: ["openma/sandbox-base:x"] });
    expect(summarize([...base, fake("bubblewrap", "missing"), fake("docker", "ok"), imagesLoaded]).embeddedDefault).toMatchObject({
      runnable: true,
      sandbox: "docker",
    });
    const noImage = fake("images", "missing", { baseImage: "openma/sandbox-base:x", loaded: [] });
    const none = summarize([...base, fake("bubblewrap", "missing"), fake("docker", "ok"), noImage]);
    expect(none.ok).toBe(false);
    expect(none.embeddedDefault.sandbox).toBeNull();
    expect(none.embeddedDefault.reason).toContain("fail closed");
    expect(summarize([fake("node", "ok"), fake("sqlite", "missing"), fake("bubblewrap", "ok")]).ok).toBe(false);
  });

  it("prints JSON with --json, exits 0 when runnable and 2 on a bad argument", async () => {
    const json = await cli(["doctor", "--json"], { DATABASE_URL: "" });
    expect(json.code).toBe(0);
    const report = JSON.parse(json.stdout) as { ok: boolean; checks: Array<{ id: string }> };
    expect(report.ok).toBe(true);
    expect(report.checks.map((c) => c.id)).toEqual([
      "node",
      "sqlite",
      "postgres",
      "bubblewrap",
      "docker",
      "images",
      "cgroups",
      "sandboxes",
    ]);
    const human = await cli(["doctor"], { DATABASE_URL: "" });
    expect(human.stdout).toContain("embedded default: can run");
    const bad = await cli(["doctor", "--yaml"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("unknown argument --yaml");
  });
});
