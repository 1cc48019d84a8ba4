/** The six sandbox tools of `agent_toolset_20260401` as the model sees them. */
import type { ModelToolDefinition } from "../server-tools.ts";

export const SANDBOX_TOOL_DEFINITIONS: readonly ModelToolDefinition[] = [
  {
    name: "bash",
    description:
      "Run a command in a persistent /bin/bash shell in the session's sandbox and return its combined stdout and stderr. " +
      "The working directory, exported variables and background jobs carry over between calls; the first shell starts in the workspace. " +
      "A non-zero exit status is reported as an error. A command that times out is killed and the shell is kept; restart replaces the shell.",
    input_schema: {
      type: "object",
      properties: {
        command: { type: "string", description: "The command to run." },
        restart: { type: "boolean", description: "Replace the shell with a fresh one (before running command, if given)." },
        timeout_ms: { type: "integer", minimum: 0, description: "Kill the command after this many milliseconds (default 120000)." },
      },
    },
  },
  {
    name: "read",
    description: "Read a UTF-8 text file in the workspace. Large files must be read in parts with view_range.",
    input_schema: {
      type: "object",
      properties: {
        file_path: { type: "string", description: "Path, absolute or relative to the workspace." },
        view_range: {
          type: "array",
          items: { type: "integer" },
          minItems: 2,
          maxItems: 2,
          description: "[start_line, end_line], 1-based and inclusive; end_line <= 0 reads to the end.",
        },
      },
      required: ["file_path"],
    },
  },
  {
    name: "write",
    description: "Create or replace a file in the workspace with the given content (parent directories are created).",
    input_schema: {
      type: "object",
      properties: { file_path: { type: "string" }, content: { type: "string" } },
      required: ["file_path", "content"],
    },
  },
  {
    name: "edit",
    description: "Replace an exact string in a workspace file. old_string must occur exactly once unless replace_all is true.",
    input_schema: {
      type: "object",
      properties: {
        file_path: { type: "string" },
        old_string: { type: "string" },
        new_string: { type: "string" },
        replace_all: { type: "boolean" },
      },
      required: ["file_path", "old_string", "new_string"],
    },
  },
  {
    name: "glob",
    description: "List workspace files matching a relative glob pattern (*, **, ?, [..], {a,b}), newest first.",
    input_schema: {
      type: "object",
      properties: {
        pattern: { type: "string" },
        path: { type: "string", description: "Directory to search (default: the workspace)." },
      },
      required: ["pattern"],
    },
  },
  {
    name: "grep",
    description: "Search file contents for a regular expression; prints path:line:text for every matching line.",
    input_schema: {
      type: "object",
      properties: {
        pattern: { type: "string", description: "A JavaScript regular expression." },
        path: { type: "string", description: "File or directory to search (default: the workspace)." },
      },
      required: ["pattern"],
    },
  },
];

export const SANDBOX_TOOL_NAMES: ReadonlySet<string> = new Set(SANDBOX_TOOL_DEFINITIONS.map((d) => d.name));
