/**
 * Gives a host directory tree to a sandbox's uid before the sandbox starts
 * (a restored workspace belongs to the host). Never follows symlinks.
 */
import { lchown, readdir } from "node:fs/promises";

export async function chownTree(root: string, uid: number, gid: number): Promise<void> {
  const pending = [root];
  while (pending.length > 0) {
    const dir = pending.pop() as string;
    await lchown(dir, uid, gid);
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) pending.push(path);
      else await lchown(path, uid, gid);
    }
  }
}
