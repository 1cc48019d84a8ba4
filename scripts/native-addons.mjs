#!/usr/bin/env node
// Root `postinstall`: builds the project's native addons (better-sqlite3)
// against the Node that runs the project, not the one that runs npm.
//
// Why a script of our own: `npm install` runs on the machine's Node (often 20),
// and a user-level `nodedir` may point node-gyp at that Node's headers, so the
// addon's own install script would build for the wrong ABI. The project brings
// Node 24 as the `node-linux-*` package; npm puts its `bin/node` first on PATH
// for every script, so this file already runs on it, and its `include/node`
// holds the matching headers. better-sqlite3's own install script is denied in
// package.json's `allowScripts` (it would compile once for nothing, after a
// prebuilt download that cannot succeed offline).
//
// Builds are cached per (package version, Node ABI, platform, arch) under
// $OPENMA_NATIVE_CACHE (default ~/.cache/openma/native), so a clean clone on a
// machine that built once before installs in seconds.
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, realpathSync, renameSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

const MIN_NODE_MAJOR = 24;
const require = createRequire(import.meta.url);

function log(message) {
  process.stderr.write(`native-addons: ${message}\n`);
}

const major = Number(process.versions.node.split(".")[0]);
if (major < MIN_NODE_MAJOR) {
  log(
    `this install runs scripts on Node ${process.version}, but OpenMA needs Node >= ${MIN_NODE_MAJOR}. ` +
      `The project brings Node 24 through the npm registry for linux-x64 and linux-arm64 only; ` +
      `on ${process.platform}-${process.arch}, install Node ${MIN_NODE_MAJOR} LTS and run npm install again.`,
  );
  process.exit(1);
}

// Headers of the Node running this script: <prefix>/include/node.
const nodePrefix = dirname(dirname(realpathSync(process.execPath)));
if (!existsSync(join(nodePrefix, "include", "node", "node.h"))) {
  log(`no headers under ${nodePrefix}/include/node for Node ${process.version}; cannot build native addons`);
  process.exit(1);
}

const cacheRoot = process.env.OPENMA_NATIVE_CACHE || join(homedir(), ".cache", "openma", "native");

/** Loads the addon in a fresh process of this Node: true when the built binary matches its ABI. */
function loads(pkg) {
  const probe = spawnSync(process.execPath, ["-e", `new (require(${JSON.stringify(pkg)}))(":memory:").close()`], {
    cwd: dirname(require.resolve(`${pkg}/package.json`)),
    stdio: "ignore",
  });
  return probe.status === 0;
}

function nodeGyp() {
  // npm passes its bundled node-gyp to every lifecycle script.
  const fromNpm = process.env.npm_config_node_gyp;
  if (fromNpm && existsSync(fromNpm)) return fromNpm;
  const npmCli = process.env.npm_execpath;
  if (npmCli) {
    const candidate = join(dirname(dirname(npmCli)), "node_modules", "node-gyp", "bin", "node-gyp.js");
    if (existsSync(candidate)) return candidate;
  }
  throw new Error("node-gyp not found: run this through npm install");
}

function ensureBuilt(pkg, artifact) {
  const pkgDir = dirname(require.resolve(`${pkg}/package.json`));
  const { version } = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
  const target = join(pkgDir, artifact);
  if (existsSync(target) && loads(pkg)) {
    log(`${pkg}@${version}: built for Node ${process.version} already`);
    return;
  }
  const key = `${pkg}-${version}-abi${process.versions.modules}-${process.platform}-${process.arch}.node`;
  const cached = join(cacheRoot, key);
  if (existsSync(cached)) {
    mkdirSync(dirname(target), { recursive: true });
    copyFileSync(cached, target);
    if (loads(pkg)) {
      log(`${pkg}@${version}: restored from ${cached}`);
      return;
    }
    log(`${pkg}@${version}: cached build at ${cached} does not load; rebuilding`);
  }
  log(`${pkg}@${version}: compiling against Node ${process.version} headers in ${nodePrefix} (once per machine)`);
  // The compiler's warnings are noise to someone installing; show them only when the build fails.
  const build = spawnSync(process.execPath, [nodeGyp(), "rebuild", "--release", `--nodedir=${nodePrefix}`], {
    cwd: pkgDir,
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, npm_config_nodedir: nodePrefix },
  });
  if (build.status !== 0) {
    process.stderr.write(`${build.stdout}\n${build.stderr}\n`);
    throw new Error(`${pkg}: node-gyp rebuild failed (exit ${build.status ?? build.signal})`);
  }
  if (!loads(pkg)) throw new Error(`${pkg} was compiled but does not load in Node ${process.version}`);
  mkdirSync(cacheRoot, { recursive: true });
  const partial = `${cached}.${process.pid}.partial`;
  copyFileSync(target, partial);
  renameSync(partial, cached);
  log(`${pkg}@${version}: built and cached at ${cached}`);
}

ensureBuilt("better-sqlite3", "build/Release/better_sqlite3.node");
