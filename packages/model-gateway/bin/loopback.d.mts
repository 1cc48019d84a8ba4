import type { Server } from "node:net";

/** Listens on 127.0.0.1:`port` (0: any free port), forwarding every connection to `socketPath`. */
export function forwardLoopbackTo(socketPath: string, port?: number): Promise<{ server: Server; port: number }>;
