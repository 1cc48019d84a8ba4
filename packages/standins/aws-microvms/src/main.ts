/**
 * Runs the stand-in on its own: `npx tsx packages/standins/aws-microvms/src/main.ts`.
 * It prints the AWS variables that point the official client at it and serves
 * until interrupted, removing its VMs on the way out. PORT and HOST as for
 * `openma standin`; AWS_SECRET_ACCESS_KEY (optional) is the secret it accepts
 * for its access key id. Images: MICROVM_IMAGES names a JSON file
 * `{"<identifier>": {"command": [...], "files": [{"path", "content"}]}}`.
 */
import { readFileSync } from "node:fs";
import { type MicrovmImage, startMicrovmsStandIn } from "./index.ts";

const port = Number(process.env.PORT ?? 0);
if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error("PORT must be a port number");
const images = process.env.MICROVM_IMAGES
  ? (JSON.parse(readFileSync(process.env.MICROVM_IMAGES, "utf8")) as Record<string, MicrovmImage>)
  : {};
const standIn = await startMicrovmsStandIn({
  port,
  host: process.env.HOST || undefined,
  apiKey: process.env.AWS_SECRET_ACCESS_KEY || undefined,
  images,
});
process.stdout.write(`aws-microvms stand-in listening on ${standIn.url}\n\n`);
for (const [name, value] of Object.entries(standIn.env))
  if (name !== "AWS_SECRET_ACCESS_KEY") process.stdout.write(`export ${name}=${value}\n`);
process.stdout.write(
  `# AWS_SECRET_ACCESS_KEY: ${process.env.AWS_SECRET_ACCESS_KEY ? "the one you gave" : "the built-in test secret (DEFAULT_CREDENTIALS)"}\n`,
);
process.stdout.write(`# images: ${Object.keys(images).join(", ") || "none"}\n`);
const stop = () => void standIn.close().then(() => process.exit(0));
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
