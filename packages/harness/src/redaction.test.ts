import { describe, expect, it } from "vitest";
import { redactOutcome, SecretRedactor } from "./redaction.ts";

describe("SecretRedactor", () => {
  it("redacts a secret and its URL- and JSON-escaped forms, longest first", () => {
    const r = new SecretRedactor();
    r.add('p@ss/word"x');
    r.add("p@ss");
    r.add(undefined);
    r.add("");
    expect(r.redact('a p@ss/word"x b')).toBe("a [redacted credential] b");
    expect(r.redact("q=p%40ss%2Fword%22x")).toBe("q=[redacted credential]");
    expect(r.redact('{"k":"p@ss/word\\"x"}')).toBe('{"k":"[redacted credential]"}');
    expect(r.redact("p@ss only")).toBe("[redacted credential] only");
    expect(r.redact("nothing here")).toBe("nothing here");
  });
});

describe("redactOutcome", () => {
  const secret = "real-secret-abc123";
  const redactor = new SecretRedactor();
  redactor.add(secret);

  it("redacts every text block of a tool result and a session error's message", () => {
    const outcome = {
      content: [
        { type: "text" as const, text: `you sent Bearer ${secret}` },
        { type: "text" as const, text: `{"token":"${secret}"}` },
      ],
      isError: false,
      sessionError: { type: "unknown_error", message: `failed with ${secret}`, retry_status: { type: "retrying" } },
    };
    const out = redactOutcome(redactor, outcome);
    expect(out.content.map((c) => c.text)).toEqual(["you sent Bearer [redacted credential]", '{"token":"[redacted credential]"}']);
    expect(out.sessionError).toEqual({
      type: "unknown_error",
      message: "failed with [redacted credential]",
      retry_status: { type: "retrying" },
    });
    expect(out.isError).toBe(false);
    expect(JSON.stringify(out)).not.toContain(secret);
    // The input is not changed (it may be reused by the caller).
    expect(outcome.content[0]?.text).toContain(secret);
  });

  it("leaves an outcome alone when no secret is known", () => {
    const outcome = { content: [{ type: "text" as const, text: secret }], isError: true };
    expect(redactOutcome(new SecretRedactor(), outcome)).toBe(outcome);
  });

  it("redacts a web_search hit's title, source and text too", () => {
    const redactor = new SecretRedactor();
    redactor.add(secret);
    const hit = {
      type: "search_result" as const,
      source: `https://example.test/?key=${secret}`,
      title: `leaked ${secret}`,
      content: [{ type: "text" as const, text: `body ${secret}` }],
      citations: { enabled: true },
    };
    const out = redactOutcome(redactor, { content: [hit], isError: false });
    expect(JSON.stringify(out)).not.toContain(secret);
    expect(out.content[0]).toMatchObject({ type: "search_result", title: "leaked [redacted credential]", citations: { enabled: true } });
  });
});
