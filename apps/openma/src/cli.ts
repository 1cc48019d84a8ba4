/** `openma <command>`: checks the Node version first, then loads the commands (an old Node gets a message, not a stack trace). */
import { unsupportedNode } from "./node-version.ts";

const refusal = unsupportedNode(process.versions.node, process.execPath);
if (refusal !== null) {
  process.stderr.write(`openma: ${refusal}`);
  process.exit(1);
}

const { main } = await import("./commands.ts");
main(process.argv.slice(2)).catch((err: Error) => {
  process.stderr.write(`openma: ${err.message}\n`);
  process.exit(1);
});
