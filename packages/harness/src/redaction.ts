/**
 * The one place known secret values are taken out of text the session log
 * will hold: web_fetch and MCP results as they are made, and every tool
 * result (sandbox tools included) again before it is appended, since an
 * upstream reached from the sandbox through the egress gateway may echo a
 * substituted credential back into `bash` output.
 */

/**
 * Replaces every known secret (and its URL- and JSON-escaped forms) with a
 * marker. Applied to all tool output and error text as a last line of
 * defence: a third party may echo a header back.
 */
export class SecretRedactor {
  private needles: string[] = [];

  add(secret: string | undefined): void {
    if (!secret) return;
    const forms = new Set([secret, encodeURIComponent(secret), JSON.stringify(secret).slice(1, -1)]);
    for (const form of forms) if (form.length > 0 && !this.needles.includes(form)) this.needles.push(form);
    // Longest first, so a secret that contains another is replaced whole.
    this.needles.sort((a, b) => b.length - a.length);
  }

  get empty(): boolean {
    return this.needles.length === 0;
  }

  redact(text: string): string {
    let out = text;
    for (const needle of this.needles) if (out.includes(needle)) out = out.split(needle).join("[redacted credential]");
    return out;
  }
}

type TextBlock = { type: "text"; text: string };

/** A tool's outcome with every text block, and a session error's message, redacted. */
export function redactOutcome<T extends { content: TextBlock[]; sessionError?: Record<string, unknown> | undefined }>(
  redactor: SecretRedactor,
  outcome: T,
): T {
  if (redactor.empty) return outcome;
  const content = outcome.content.map((block) => ({ ...block, text: redactor.redact(block.text) }));
  const error = outcome.sessionError;
  const message = error?.message;
  const sessionError = typeof message === "string" ? { ...error, message: redactor.redact(message) } : error;
  return { ...outcome, content, sessionError };
}
