/**
 * A local package registry stand-in for npm and pip, on the host's
 * non-loopback address (sandboxes reach it through their egress gateway,
 * which refuses loopback). It serves real package archives built here: an
 * npm tarball made by `npm pack` (a module plus a `bin`), and a wheel with a
 * module and a console script, through the protocols the clients speak
 * unchanged: the npm registry's packument + tarball, and pip's simple
 * repository API (PEP 503).
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hostIpv4 } from "@openma/egress/testing";

export const NPM_PACKAGE = "openma-demo-cli";
export const PIP_PACKAGE = "openma-demo";

export interface PackageRegistry {
  /** The host address the registry listens on (allow it in a limited environment). */
  host: string;
  /** npm registry URL (`npm_config_registry`). */
  npm: string;
  /** pip index URL (`PIP_INDEX_URL`). */
  pip: string;
  /** Request paths served, in order (what the clients fetched). */
  requests: string[];
  close(): Promise<void>;
}

/** Builds the wheel with Python's own zipfile (RECORD hashes as the wheel spec says). */
const WHEEL_BUILDER = `
import base64, hashlib, sys, zipfile
files = {
  "openma_demo/__init__.py": "ANSWER = 42\\ndef main():\\n    print('demo-py', ANSWER)\\n",
  "openma_demo-1.0.0.dist-info/METADATA": "Metadata-Version: 2.1\\nName: openma-demo\\nVersion: 1.0.0\\n",
  "openma_demo-1.0.0.dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: openma-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
  "openma_demo-1.0.0.dist-info/entry_points.txt": "[console_scripts]\\nopenma-demo-py = openma_demo:main\\n",
}
record = []
with zipfile.ZipFile(sys.argv[1], "w") as z:
  for name, text in files.items():
    data = text.encode()
    z.writestr(name, data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(data)}")
  record.append("openma_demo-1.0.0.dist-info/RECORD,,")
  z.writestr("openma_demo-1.0.0.dist-info/RECORD", "\\n".join(record) + "\\n")
`;

export async function startPackageRegistry(): Promise<PackageRegistry> {
  const host = hostIpv4();
  const dir = await mkdtemp(join(tmpdir(), "openma-registry-"));
  const pkg = join(dir, "npm");
  execFileSync("mkdir", ["-p", pkg]);
  await writeFile(
    join(pkg, "package.json"),
    JSON.stringify({ name: NPM_PACKAGE, version: "1.0.0", main: "index.js", bin: { "openma-demo": "cli.js" } }),
  );
  await writeFile(join(pkg, "index.js"), "module.exports = { answer: 42 };\n");
  await writeFile(join(pkg, "cli.js"), '#!/usr/bin/env node\nconsole.log("demo-cli", require("./index.js").answer);\n');
  const tarName = execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: pkg, encoding: "utf8" }).trim();
  const tarball = await readFile(join(dir, tarName));
  const wheelName = "openma_demo-1.0.0-py3-none-any.whl";
  execFileSync("python3", ["-c", WHEEL_BUILDER, join(dir, wheelName)]);
  const wheel = await readFile(join(dir, wheelName));

  const requests: string[] = [];
  let base = "";
  const server = http.createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    requests.push(path);
    if (path === `/${NPM_PACKAGE}`) {
      const version = {
        name: NPM_PACKAGE,
        version: "1.0.0",
        main: "index.js",
        bin: { "openma-demo": "cli.js" },
        dist: {
          tarball: `${base}/${NPM_PACKAGE}/-/${tarName}`,
          shasum: createHash("sha1").update(tarball).digest("hex"),
          integrity: `sha512-${createHash("sha512").update(tarball).digest("base64")}`,
        },
      };
      res.setHeader("content-type", "application/json");
      return res.end(JSON.stringify({ name: NPM_PACKAGE, "dist-tags": { latest: "1.0.0" }, versions: { "1.0.0": version } }));
    }
    if (path === `/${NPM_PACKAGE}/-/${tarName}`) return res.end(tarball);
    if (path === `/simple/${PIP_PACKAGE}/`) {
      const sha = createHash("sha256").update(wheel).digest("hex");
      res.setHeader("content-type", "text/html");
      return res.end(`<!DOCTYPE html><html><body><a href="/files/${wheelName}#sha256=${sha}">${wheelName}</a></body></html>`);
    }
    if (path === `/files/${wheelName}`) return res.end(wheel);
    res.statusCode = 404;
    res.end("not found");
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  base = `http://${host}:${(server.address() as AddressInfo).port}`;
  return {
    host,
    npm: `${base}/`,
    pip: `${base}/simple/`,
    requests,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      await rm(dir, { recursive: true, force: true });
    },
  };
}
