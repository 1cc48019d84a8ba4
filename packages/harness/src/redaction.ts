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
/** A web_search hit: its title, source and text are third-party content too. */
type SearchBlock = { type: "search_result"; source: string; title: string; content: TextBlock[] };

function redactBlock<B extends TextBlock | SearchBlock>(redactor: SecretRedactor, block: B): B {
  if (block.type === "text") return { ...block, text: redactor.redact(block.text) };
  const hit = block as SearchBlock;
  return {
    ...block,
    source: redactor.redact(hit.source),
    title: redactor.redact(hit.title),
    content: hit.content.map((inner) => ({ ...inner, text: redactor.redact(inner.text) })),
  };
}

/** A tool's outcome with every text (search hits included), and a session error's message, redacted. */
export function redactOutcome<T extends { content: Array<TextBlock | SearchBlock>; sessionError?: Record<string, unknown> | undefined }>(
  redactor: SecretRedactor,
  outcome: T,
): T {
  if (redactor.empty) return outcome;
  const content = outcome.content.map((block) => redactBlock(redactor, block));
  const error = outcome.sessionError;
  const message = error?.message;
  const sessionError = typeof message === "string" ? { ...error, message: redactor.redact(message) } : error;
  return { ...outcome, content, sessionError };
}
