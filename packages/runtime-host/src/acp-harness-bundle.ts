/**
 * The in-sandbox ACP harness as one self-contained file (acp-harness/main.ts
 * with @openma/acp, the ACP SDK, the Anthropic SDK, zod and the model
 * gateway's loopback forwarder built in, by
 * esbuild), so it runs on the sandbox image's Node with no node_modules.
 * Built once per runtime host into a host directory bound read-only at
 * /openma/acp-harness. The ACP agents themselves come from the agent cache,
 * bound read-only at /openma/agents.
 */
import { createHash } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { bundleForSandboxNode } from "./worker-bundle.ts";

export interface AcpHarnessBundle {
  /** Host directory holding `acp-harness.mjs`. */
  dir: string;
  sha256: string;
}

export async function buildAcpHarnessBundle(outDir: string): Promise<AcpHarnessBundle> {
  const content = await bundleForSandboxNode({
    contents: 'import { runAcpHarness } from "./acp-harness/main.ts";\nrunAcpHarness();\n',
    resolveDir: dirname(fileURLToPath(import.meta.url)),
    sourcefile: "acp-harness-entry.ts",
    loader: "ts",
    withRequire: true,
  });
  await mkdir(outDir, { recursive: true, mode: 0o755 });
  await writeFile(join(outDir, "acp-harness.mjs"), content, { mode: 0o644 });
  return { dir: outDir, sha256: createHash("sha256").update(content).digest("hex") };
}
