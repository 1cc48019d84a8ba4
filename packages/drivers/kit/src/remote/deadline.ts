/**
 * A bound on one provider call. SDKs differ in whether they honour an
 * AbortSignal (E2B does, Daytona and Sprites mostly do not), so the call is
 * also raced against the deadline: past it the caller gets a retryable
 * timeout at once, and the abandoned call is left to finish on its own.
 * What it produces after that (a runtime created too late, a command
 * started too late) goes to `late`, so the caller can undo it instead of
 * leaking it.
 */

export class ProviderTimeoutError extends Error {
  readonly retryable = true;
}

export function withDeadline<T>(
  what: string,
  ms: number,
  signal: AbortSignal,
  work: (signal: AbortSignal) => Promise<T>,
  late?: (value: T) => void,
): Promise<T> {
  const bound = AbortSignal.any([signal, AbortSignal.timeout(ms)]);
  const call = work(bound);
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const onAbort = () => {
      if (settled) return;
      settled = true;
      reject(
        signal.aborted ? new ProviderTimeoutError(`${what} was cancelled`) : new ProviderTimeoutError(`${what}: no answer within ${ms} ms`),
      );
    };
    bound.addEventListener("abort", onAbort, { once: true });
    call.then(
      (value) => {
        bound.removeEventListener("abort", onAbort);
        if (settled) {
          late?.(value);
          return;
        }
        settled = true;
        resolve(value);
      },
      (err: unknown) => {
        bound.removeEventListener("abort", onAbort);
        if (settled) return;
        settled = true;
        reject(err);
      },
    );
  });
}
