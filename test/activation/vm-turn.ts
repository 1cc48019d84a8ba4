/**
 * The turn the MicroVM tests run: the model asks for one bash call that only
 * succeeds inside a VM (the in-VM worker's file is there), then ends the turn.
 */
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";

const USAGE = { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };

/** The tool result the VM's bash call produces. */
export const SERVED_IN_THE_VM = /served-in-the-vm\nmicrovm-worker\.mjs/;

/** A scripted model answering a user message containing IN_THE_VM with that bash call, then "done". */
export function startVmTurnModel(apiKey: string): Promise<ScriptedModel> {
  return startScriptedModel({
    apiKey,
    script: [
      {
        label: "bash",
        match: { last_user_text_contains: "IN_THE_VM" },
        response: {
          content: [{ type: "tool_use", name: "bash", input: { command: "echo served-in-the-vm && ls /opt/openma" } }],
          usage: USAGE,
        },
      },
      { label: "done", match: { tool_result_for: "bash" }, response: { content: [{ type: "text", text: "done" }], usage: USAGE } },
    ],
  });
}
