/** SSE framing and chunking shared by the dialects' stream builders. */

/** One SSE message with an `event:` line naming it (Anthropic, OpenAI Responses). */
export function sseFrame(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** One SSE message with only a data line (OpenAI Chat Completions; Gemini ends its frames with CRLF pairs). */
export function dataFrame(data: unknown, end = "\n\n"): string {
  return `data: ${typeof data === "string" ? data : JSON.stringify(data)}${end}`;
}

export function chunk(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

export const DEFAULT_CHUNK_CHARS = 16;
