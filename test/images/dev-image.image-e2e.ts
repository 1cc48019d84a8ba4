/**
 * The dev image as an agent meets it on the Docker driver: unprivileged
 * (uid 1000, read-only root), with git, curl, wget, python3 with pip and
 * venv, npm, a C toolchain, jq, ripgrep, unzip and ssh on PATH and working.
 * Fails (never skips) when the dev image was not built.
 */
import { OUTPUTS_MOUNT_PATH, WORKSPACE_MOUNT_PATH } from "@openma/contract";
import { connectDocker, imagePresent, NodeDockerSandbox, readImageManifest } from "@openma/driver-node-docker";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const docker = connectDocker();
const labels = { "openma.test-run": `dev-image-${process.pid}` };
let driver: NodeDockerSandbox;
let lease: Parameters<NodeDockerSandbox["toolSandbox"]>[0];
const scope = { environmentId: "env_devimage", sessionId: `sesn_devimage_${process.pid}` };
const fence = { scope, ownerId: "owner-devimage", generation: 1, expiresAt: Date.now() + 600_000 };

async function sh(script: string): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const result = await driver
    .toolSandbox(lease)
    .exec({ command: ["bash", "-c", script], timeoutMs: 60_000, signal: AbortSignal.timeout(90_000) });
  if (result.type !== "exited") throw new Error(`exec did not exit: ${result.type}`);
  const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");
  return { exitCode: result.exitCode, stdout: text(result.stdout), stderr: text(result.stderr) };
}

beforeAll(async () => {
  const manifest = await readImageManifest();
  if (!manifest.ok) throw new Error(manifest.message);
  const dev = manifest.manifest.dev;
  if (dev === undefined) throw new Error("no dev image in the manifest: run `OPENMA_DEV_IMAGE=1 npm run provision`");
  if (!(await imagePresent(docker, dev.image))) throw new Error(`${dev.image} is not loaded in dockerd`);
  driver = new NodeDockerSandbox({ image: dev.image, docker, labels, namePrefix: "openma-devimage" });
  const acquired = await driver.acquire({
    scope,
    fence,
    workspace: { bindingId: "ws", strategy: "ephemeral", mountPath: WORKSPACE_MOUNT_PATH },
    outputs: null,
    idempotencyKey: "dev",
    signal: AbortSignal.timeout(60_000),
  });
  if (acquired.type !== "acquired") throw new Error(acquired.reason);
  lease = acquired.lease;
});

afterAll(async () => {
  if (lease) await driver.terminate({ scope, fence, lease, reason: "completed", signal: AbortSignal.timeout(30_000) });
});

describe("the dev image on the Docker driver", () => {
  it("runs the agent as the unprivileged agent user on a read-only root", async () => {
    expect(await sh("id -un; id -u; echo $HOME; touch /usr/local/bin/x 2>&1; echo rc=$?")).toMatchObject({
      exitCode: 0,
      stdout: expect.stringMatching(/^agent\n1000\n\/home\/agent\n.*Read-only file system\nrc=1\n$/),
    });
    expect(OUTPUTS_MOUNT_PATH).toBe("/mnt/session/outputs");
  });

  it("has the toolchain a coding agent expects, working", async () => {
    const tools = await sh(
      [
        "set -e",
        "git --version",
        "curl --version | head -1",
        "wget --version | head -1",
        "python3 -m pip --version",
        "npm --version",
        "node --version",
        "gcc --version | head -1",
        "make --version | head -1",
        "jq --version",
        "rg --version | head -1",
        "unzip -v | head -1",
        "ssh -V 2>&1",
      ].join("\n"),
    );
    expect(tools.exitCode, tools.stderr).toBe(0);
    for (const expected of [
      /^git version 2\./m,
      /^curl \d/m,
      /^GNU Wget/m,
      /^pip \d/m,
      /^v24\./m,
      /^gcc /m,
      /^GNU Make/m,
      /^jq-/m,
      /^ripgrep/m,
      /^UnZip/m,
      /^OpenSSH_/m,
    ])
      expect(tools.stdout).toMatch(expected);
  });

  it("builds and runs C, makes a venv, and uses git in the workspace", async () => {
    const work = await sh(
      [
        "set -e",
        "cd /workspace",
        "printf 'int main(void){return 42;}' > a.c && gcc -o a a.c && { ./a || echo c=$?; }",
        "python3 -m venv .venv && .venv/bin/python -c 'import sys; print(sys.prefix)'",
        "git init -q repo && cd repo && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m first && git log --oneline | wc -l",
        "echo '{\"a\":[1,2]}' | jq -c '.a|length'",
      ].join("\n"),
    );
    expect(work).toMatchObject({ exitCode: 0, stdout: "c=42\n/workspace/.venv\n1\n2\n" });
  });
});
