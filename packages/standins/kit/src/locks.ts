/**
 * Serializes lifecycle changes per key (a wake racing a sleep, an archive
 * racing an unarchive): each piece of work starts once the previous one on
 * the same key has settled, whether it succeeded or not.
 */
export class KeyedLocks {
  readonly #tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, work: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    const next = previous.then(work, work);
    this.#tails.set(
      key,
      next.catch(() => {}),
    );
    return next;
  }
}
