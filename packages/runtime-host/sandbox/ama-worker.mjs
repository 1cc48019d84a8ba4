// The ama_worker launcher of a local sandbox: the official SDK is bound
// read-only at /openma/node_modules (see ama-worker-core.mjs).
import { pathToFileURL } from "node:url";
import { runWorker } from "./ama-worker-core.mjs";

const SDK = "/openma/node_modules/@anthropic-ai/sdk/index.mjs";

runWorker(async () => (await import(pathToFileURL(SDK).href)).default);
