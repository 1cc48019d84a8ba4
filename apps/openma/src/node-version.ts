/**
 * The Node.js versions OpenMA runs on. Imports nothing, so the CLI can check
 * before loading any module that an older Node could not even link.
 */
export const MIN_NODE_MAJOR = 24;

/** Null when `version` (as in `process.versions.node`) is supported, else a message saying what to do. */
export function unsupportedNode(version: string, execPath: string): string | null {
  const major = Number(version.split(".")[0]);
  if (major >= MIN_NODE_MAJOR) return null;
  return (
    `OpenMA needs Node.js ${MIN_NODE_MAJOR} or newer, but this is Node v${version} (${execPath}).\n` +
    `\`npm install\` brings Node ${MIN_NODE_MAJOR} into node_modules/.bin (on linux-x64 and linux-arm64): start through\n` +
    "`npm start` or `npx openma`, which put it first on PATH, or install Node.js 24 LTS yourself.\n"
  );
}
