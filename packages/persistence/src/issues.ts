/**
 * Every refusal in this package is a value with a stable code, the logical
 * path it concerns and a sentence a person can act on. Internally code throws
 * `IssueError` to unwind; public functions always return the `Issue`.
 */

export type IssueCode =
  // Walking or reading a live tree (workspace or outputs)
  | "symlink"
  | "symlink_escape"
  | "special_file"
  | "invalid_path"
  | "too_many_entries"
  | "file_too_large"
  | "total_too_large"
  | "changed"
  | "unreadable"
  | "not_a_directory"
  // A stored candidate that must be rejected
  | "invalid_id"
  | "manifest_missing"
  | "manifest_corrupt"
  | "manifest_invalid"
  | "chunk_missing"
  | "chunk_corrupt"
  | "file_corrupt"
  | "chunk_vanished"
  // Infrastructure: not the candidate's fault, so no fallback to an older one
  | "store_error"
  | "target_error"
  | "no_verified_candidate";

export interface Issue {
  code: IssueCode;
  /** Logical path ("" for the tree root or the candidate as a whole). */
  path: string;
  message: string;
}

export class IssueError extends Error {
  constructor(readonly issue: Issue) {
    super(`${issue.path || "."}: ${issue.message}`);
  }
}

export function issue(code: IssueCode, path: string, message: string): IssueError {
  return new IssueError({ code, path, message });
}

/** Unwraps an IssueError, or classifies an unexpected error under `fallback`. */
export function toIssue(err: unknown, fallback: IssueCode, path = ""): Issue {
  if (err instanceof IssueError) return err.issue;
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const message = err instanceof Error ? err.message : String(err);
  return { code: fallback, path, message: code ? `${code}: ${message}` : message };
}
