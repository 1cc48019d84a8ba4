/** SSE framing as the SDK's parser reads it. */
import { Stream } from "@anthropic-ai/sdk/core/streaming";
import { describe, expect, it } from "vitest";
import { formatSseComment, formatSseMessage } from "./sse.ts";

async function parse(wire: string) {
  const out = [];
  for await (const message of Stream.rawEvents(new Response(wire))) out.push(message);
  return out;
}

describe("sse framing", () => {
  it("writes event, id and one data line per message", () => {
    expect(formatSseMessage({ event: "agent.message", id: "sevt_1", data: '{"a":1}' })).toBe(
      'event: agent.message\nid: sevt_1\ndata: {"a":1}\n\n',
    );
    expect(formatSseMessage({ event: "error", data: "{}" })).toBe("event: error\ndata: {}\n\n");
  });

  it("round-trips through the SDK parser, comments included", async () => {
    const wire =
      formatSseComment("connected") +
      formatSseMessage({ event: "user.message", id: "sevt_1", data: JSON.stringify({ text: "a\nb" }) }) +
      formatSseComment("keep-alive") +
      formatSseMessage({ event: "multi", data: "line1\nline2" });
    const messages = await parse(wire);
    expect(messages.map((m) => [m.event, m.data])).toEqual([
      ["user.message", JSON.stringify({ text: "a\nb" })],
      ["multi", "line1\nline2"],
    ]);
    expect(messages[0]?.raw).toContain("id: sevt_1");
  });

  it("cannot be broken by newlines in field values", async () => {
    const wire =
      formatSseMessage({ event: "a\nevent: forged", id: "x\r\ndata: forged", data: "{}" }) + formatSseComment("c\nevent: forged");
    const messages = await parse(wire);
    expect(messages).toHaveLength(1);
    expect(messages[0]?.event).toBe("a event: forged");
    expect(messages[0]?.data).toBe("{}");
  });
});
