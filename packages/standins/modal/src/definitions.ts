/**
 * Modal's gRPC services as the `modal` SDK itself defines them. The package
 * ships no `.proto` files: its bundle carries the generated code (the
 * protobuf wire helpers, the `modal.client` messages and services, and the
 * `modal.task_command_router` ones) and exports none of it. Rather than
 * re-declaring hundreds of messages by hand (and drifting from the SDK),
 * the stand-in evaluates exactly those generated sections of the installed
 * bundle, once, and serves the service definitions they declare. Every
 * message the stand-in decodes or encodes therefore uses the SDK's own
 * field numbers and types.
 *
 * The sections are located by the bundler's source markers; a bundle
 * without them (another SDK line) fails loudly here rather than serving a
 * guessed protocol.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/** A message codec as ts-proto generates it. */
export interface MessageType<T = Record<string, unknown>> {
  encode(message: T): { finish(): Uint8Array };
  decode(input: Uint8Array): T;
  fromPartial(object: Partial<T> | Record<string, unknown>): T;
}

export interface MethodDefinition {
  name: string;
  requestType: MessageType;
  requestStream: boolean;
  responseType: MessageType;
  responseStream: boolean;
  options: Record<string, unknown>;
}

export interface ServiceDefinition {
  name: string;
  fullName: string;
  methods: Record<string, MethodDefinition>;
}

export interface ModalDefinitions {
  /** `modal.client.ModalClient`: the control plane. */
  modalClient: ServiceDefinition;
  /** `modal.task_command_router.TaskCommandRouter`: exec and stdio of one task. */
  taskCommandRouter: ServiceDefinition;
  /** Messages the stand-in builds itself: a rate limit's status details. */
  messages: { RPCStatus: MessageType; RPCRetryPolicy: MessageType };
  /** The SDK version the definitions came from. */
  sdkVersion: string;
}

const SECTIONS = [
  // The protobuf wire helpers, google.protobuf types and modal_proto/api.ts, up to the SDK's first own source file.
  { start: "// node_modules/@bufbuild/protobuf/dist/esm/wire/varint.js", end: "\n// src/" },
  { start: "// proto/modal_proto/task_command_router.ts", end: "\n// src/" },
] as const;

let loaded: ModalDefinitions | null = null;

function slice(bundle: string, start: string, end: string): string {
  const from = bundle.indexOf(start);
  const to = from < 0 ? -1 : bundle.indexOf(end, from + start.length);
  if (from < 0 || to < 0) throw new Error(`the installed modal SDK's bundle has no generated section starting "${start}"`);
  return bundle.slice(from, to);
}

/** The service definitions of the installed `modal` package (evaluated once per process). */
export function modalDefinitions(): ModalDefinitions {
  if (loaded !== null) return loaded;
  const require = createRequire(import.meta.url);
  const entry = require.resolve("modal");
  const root = dirname(dirname(entry));
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version?: string };
  const bundle = readFileSync(join(root, "dist", "index.js"), "utf8");
  const code = SECTIONS.map((s) => slice(bundle, s.start, s.end)).join("\n");
  // The sections are plain declarations (no imports, no I/O): evaluating them only builds the codecs.
  const build = new Function(
    `"use strict";\n${code}\nreturn { ModalClientDefinition, TaskCommandRouterDefinition, RPCStatus, RPCRetryPolicy };`,
  ) as () => {
    ModalClientDefinition: ServiceDefinition;
    TaskCommandRouterDefinition: ServiceDefinition;
    RPCStatus: MessageType;
    RPCRetryPolicy: MessageType;
  };
  const defs = build();
  if (defs.ModalClientDefinition.fullName !== "modal.client.ModalClient")
    throw new Error(`unexpected control-plane service ${defs.ModalClientDefinition.fullName}`);
  if (defs.TaskCommandRouterDefinition.fullName !== "modal.task_command_router.TaskCommandRouter")
    throw new Error(`unexpected command-router service ${defs.TaskCommandRouterDefinition.fullName}`);
  loaded = {
    modalClient: defs.ModalClientDefinition,
    taskCommandRouter: defs.TaskCommandRouterDefinition,
    messages: { RPCStatus: defs.RPCStatus, RPCRetryPolicy: defs.RPCRetryPolicy },
    sdkVersion: pkg.version ?? "unknown",
  };
  return loaded;
}
