/** The bus's data broadcasts (the `event_deltas` transport) on both backends: delivered in order to listeners of the topic only. */
import { describe, expect, it } from "vitest";
import { MAX_BROADCAST_BYTES } from "./bus.ts";
import { BACKENDS, openTestStorage } from "./testing.ts";

describe.each(BACKENDS)("bus broadcasts on %s", (dialect) => {
  it("delivers payloads in order to the topic's listeners, keeps wake-ups apart, and refuses oversized payloads", async () => {
    const store = await openTestStorage(dialect);
    try {
      const { bus } = store.storage;
      const got: string[] = [];
      const other: string[] = [];
      let wakeups = 0;
      const done = new Promise<void>((resolve) => {
        bus.listen("previews:a", (payload) => {
          got.push(payload);
          if (payload === "last") resolve();
        });
      });
      const offOther = bus.listen("previews:b", (payload) => other.push(payload));
      const offWake = bus.subscribe("previews:a", () => wakeups++);
      const payloads = ["one", "two\nlines", JSON.stringify({ text: "é".repeat(100) }), "last"];
      for (const payload of payloads) await bus.broadcast("previews:a", payload);
      await done;
      expect(got).toEqual(payloads);
      expect(other).toEqual([]);
      expect(wakeups).toBe(0);
      await expect(bus.broadcast("previews:a", "x".repeat(MAX_BROADCAST_BYTES))).rejects.toThrow(/exceeds/);
      offOther();
      offWake();
    } finally {
      await store.cleanup();
    }
  });
});
