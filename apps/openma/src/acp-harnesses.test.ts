import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KNOWN_AGENT_RELEASES } from "@openma/acp";
import { afterEach, describe, expect, it } from "vitest";
import { checkAcpHarnesses } from "./acp-harnesses.ts";

let dir = "";
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("doctor: ACP harnesses", () => {
  it("lists releases whose lockfile pins the expected version and whose entry point exists", async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-acp-doctor-"));
    expect((await checkAcpHarnesses({ OPENMA_ACP_AGENT_CACHE: dir })).status).toBe("skipped");
    const codex = KNOWN_AGENT_RELEASES.find((r) => r.id === "codex-acp");
    if (!codex) throw new Error("no codex release");
    const home = join(dir, `${codex.package.replace("/", "+")}@${codex.version}`);
    await mkdir(join(home, codex.bin, ".."), { recursive: true });
    await writeFile(join(home, codex.bin), "");
    const lock = { packages: { [`node_modules/${codex.package}`]: { version: codex.version, integrity: "sha512-x" } } };
    await writeFile(join(home, "package-lock.json"), JSON.stringify(lock));
    const check = await checkAcpHarnesses({ OPENMA_ACP_AGENT_CACHE: dir });
    expect(check.status).toBe("ok");
    expect(check.facts.installed).toEqual([`${codex.package}@${codex.version}`]);
    // A lockfile for another version is not this release.
    await writeFile(
      join(home, "package-lock.json"),
      JSON.stringify({ packages: { [`node_modules/${codex.package}`]: { version: "0.0.1", integrity: "sha512-x" } } }),
    );
    expect((await checkAcpHarnesses({ OPENMA_ACP_AGENT_CACHE: dir })).status).toBe("skipped");
  });
});
