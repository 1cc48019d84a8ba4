/** The official SDK's error for a call the test expects to be refused (fails the test when the call succeeds). */
import Anthropic from "@anthropic-ai/sdk";
import { expect } from "vitest";

export async function errorOf(p: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Anthropic.APIError);
  return err as InstanceType<typeof Anthropic.APIError>;
}
