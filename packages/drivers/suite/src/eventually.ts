/**
 * Waits in a test for an effect outside the test's control that no event
 * announces (the kernel tearing a process tree down, another process's
 * files, an engine's listing): polls `check`, backing off from 5 ms to
 * `maxEveryMs`, until it yields a truthy value; after `timeoutMs` the test
 * fails naming `what`. Vitest-free, so any test helper can import it.
 */
export async function eventually<T>(
  check: () => Promise<T | null | undefined | false>,
  what: string,
  timeoutMs = 60_000,
  maxEveryMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 5; ; delay = Math.min(delay * 2, maxEveryMs)) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}
