/**
 * Bounded parallelism for chunk and file I/O: enough in-flight operations to
 * hide disk and network latency, few enough to bound memory (each worker
 * holds at most one file buffer) and file descriptors.
 */

/**
 * Files in flight for checkpoint and restore. Measured on a 2-CPU VM with a
 * local disk: 16 overlaps per-object fsync latency about twice as well as 8,
 * and more stops helping. Each in-flight file holds at most a few chunks.
 */
export const DEFAULT_CONCURRENCY = 16;

/**
 * Runs `fn` over `items` with at most `limit` calls in flight. After the first
 * failure no new item starts; in-flight calls finish, then the first error is
 * rethrown, so callers never clean up while a worker is still writing.
 */
export async function forEachLimit<T>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  let failed = false;
  let firstError: unknown;
  const worker = async (): Promise<void> => {
    while (!failed && next < items.length) {
      const index = next++;
      try {
        await fn(items[index]!, index);
      } catch (err) {
        if (!failed) firstError = err;
        failed = true;
      }
    }
  };
  const n = Math.max(1, Math.min(limit, items.length));
  await Promise.all(Array.from({ length: n }, worker));
  if (failed) throw firstError;
}

/** The value under `key`, made on first use (grouping placements by pack, chunks by file or pack). */
export function getOrMake<K, V>(map: Map<K, V>, key: K, make: () => V): V {
  let value = map.get(key);
  if (value === undefined) {
    value = make();
    map.set(key, value);
  }
  return value;
}
