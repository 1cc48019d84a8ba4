/**
 * How an outcome (`user.define_outcome`) reads to the agent and to the
 * grader: the task with its rubric, and the grader's verdicts that send the
 * agent back to work.
 */
import type { Storage } from "@openma/storage";
import type { OutcomeRecord } from "./log.ts";

/** The rubric's text: inline, or the UTF-8 content of the file it names. */
export async function rubricText(storage: Storage, rubric: OutcomeRecord["rubric"]): Promise<string> {
  if (rubric.type === "text") return rubric.content;
  const row = await storage.db.selectFrom("files").select("blob_key").where("id", "=", rubric.file_id).executeTakeFirst();
  const data = row ? await storage.blobs.get(row.blob_key) : null;
  return data ? data.toString("utf8") : `[rubric file ${rubric.file_id} is no longer available]`;
}

/** The user turn that hands the agent an outcome to work toward. */
export function outcomeTask(description: string, rubric: string): string {
  return `<outcome>\nWork until this outcome is achieved; a grader will check your result against the rubric.\n\nOutcome: ${description}\n\nRubric:\n${rubric}\n</outcome>`;
}

/** The user turn a verdict becomes when the agent must act on it. */
export function verdictTurn(result: string, explanation: string): string {
  if (result === "max_iterations_reached") {
    return `<outcome-evaluation>\nThe grader still found the outcome unmet and no revisions remain: briefly acknowledge where the work stands.\n\n${explanation}\n</outcome-evaluation>`;
  }
  return `<outcome-evaluation>\nThe grader found the outcome not yet met. Revise your work.\n\n${explanation}\n</outcome-evaluation>`;
}
