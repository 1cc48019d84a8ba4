/** Query of the workspace browser extension (routes/workspace.ts); the path's segments are checked in workspace-fs.ts. */
import { z } from "zod";

export const workspaceQuery = z.object({
  path: z.string().max(4096).optional().describe("A path relative to the session's workspace; empty or absent: its root"),
});
