// A session's event log, live: the history from the list endpoint, then the
// SSE stream resumed after the last event seen. A dropped stream reconnects
// with `after_id` (the server replays from there), and every event is kept
// once by id, so a reconnect neither loses nor duplicates events.
import { headers, listAll } from "./api.js";

const RETRY_MIN_MS = 250;
const RETRY_MAX_MS = 2000;

class StreamRefused extends Error {}

/** Parses SSE frames out of text chunks; calls `onMessage({event, id, data})` per message. */
export function sseParser(onMessage) {
  let buffer = "";
  return (chunk) => {
    buffer += chunk.replace(/\r\n?/g, "\n");
    let end = buffer.indexOf("\n\n");
    while (end >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      end = buffer.indexOf("\n\n");
      const message = { event: "message", id: undefined, data: [] };
      for (const line of frame.split("\n")) {
        if (line === "" || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") message.event = value;
        else if (field === "id") message.id = value;
        else if (field === "data") message.data.push(value);
      }
      if (message.data.length > 0) onMessage({ ...message, data: message.data.join("\n") });
    }
  };
}

/**
 * Follows `sessionId`'s log. `onChange(events)` gets the whole ordered list
 * after every change; `onPreviews(previews)` the agent messages being
 * written ({id, text}: streamed text, not yet in the log); `onState(state)`
 * "connecting" | "live" | "reconnecting" | "ended". Returns a function that
 * stops following.
 */
export function followSession(sessionId, { onChange, onPreviews, onState, onError }) {
  const stop = new AbortController();
  const byId = new Set();
  let events = [];
  let retryMs = RETRY_MIN_MS;
  // Previews carry the id their final event will have; the final event replaces its preview.
  const previews = new Map();
  const publishPreviews = () => onPreviews?.([...previews].map(([id, text]) => ({ id, text })));

  const add = (event) => {
    if (!event.id || byId.has(event.id)) return false;
    byId.add(event.id);
    events.push(event);
    if (previews.delete(event.id)) publishPreviews();
    return true;
  };
  const publish = () => onChange(events.slice());
  const lastId = () => events.at(-1)?.id;

  async function connect() {
    const after = lastId();
    const url = new URL(`/v1/sessions/${encodeURIComponent(sessionId)}/events/stream`, location.origin);
    if (after) url.searchParams.set("after_id", after);
    url.searchParams.set("event_deltas", "agent.message");
    const res = await fetch(url, { headers: headers({ accept: "text/event-stream" }), signal: stop.signal });
    if (!res.ok) {
      const body = await res.json().catch(() => null);
      const message = body?.error?.message ?? `event stream: HTTP ${res.status}`;
      // A refusal (no such session, a bad key) does not heal by retrying; an overloaded or restarting server does.
      if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) throw new StreamRefused(message);
      throw new Error(message);
    }
    if (!after) {
      // Without a resume point the stream starts at the log's head when it connected: the list
      // (read after that) holds everything before it, so nothing falls between the two.
      const history = await listAll(`/v1/sessions/${encodeURIComponent(sessionId)}/events`, { limit: 1000 });
      const streamed = events;
      events = [];
      byId.clear();
      for (const event of history) add(event);
      for (const event of streamed) add(event);
      publish();
    }
    onState("live");
    retryMs = RETRY_MIN_MS;
    // Frames sent while disconnected are gone (a replay has only the log): a half preview would stay half.
    previews.clear();
    publishPreviews();
    let ended = false;
    const parse = sseParser(({ event, data }) => {
      const body = JSON.parse(data);
      if (event === "error") return onError?.(body?.error?.message ?? "stream error");
      if (event === "event_start") {
        if (body.event?.type === "agent.message" && !byId.has(body.event.id)) previews.set(body.event.id, "");
        return publishPreviews();
      }
      if (event === "event_delta") {
        const text = previews.get(body.event_id);
        if (text !== undefined) previews.set(body.event_id, text + (body.delta?.content?.text ?? ""));
        return publishPreviews();
      }
      if (add(body)) publish();
      if (body.type === "session.deleted") ended = true;
    });
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parse(value);
    }
    return ended;
  }

  (async () => {
    onState("connecting");
    while (!stop.signal.aborted) {
      try {
        if (await connect()) {
          onState("ended");
          return;
        }
      } catch (err) {
        if (err instanceof StreamRefused) {
          onError?.(err.message);
          onState("ended");
          return;
        }
        // A dropped connection or a failed reconnect: try again from the last event seen.
      }
      if (stop.signal.aborted) return;
      onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, retryMs));
      retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
    }
  })();
  return () => stop.abort();
}
