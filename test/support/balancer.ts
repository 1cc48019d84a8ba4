/**
 * A TCP load balancer in front of several servers, as a deployment puts one
 * in front of its API servers: each new connection goes to the next
 * upstream in turn (skipping one that refuses), and the test changes the
 * upstream list the way a balancer following `/ready` would (a draining
 * server leaves it; a restarted one joins it). Connections already open stay
 * with their server until it closes them.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export interface Balancer {
  url: string;
  /** The ports new connections may go to. */
  upstreams: number[];
  close(): Promise<void>;
}

export async function startBalancer(upstreams: number[]): Promise<Balancer> {
  const open = new Set<Socket>();
  let next = 0;
  const balancer: Balancer = { url: "", upstreams, close: async () => {} };
  const server: Server = createServer((client) => {
    client.pause();
    open.add(client);
    client.on("close", () => open.delete(client));
    client.on("error", () => client.destroy());
    const ports = [...balancer.upstreams];
    let tried = 0;
    const attempt = () => {
      if (tried >= ports.length) return client.destroy();
      const port = ports[(next + tried++) % ports.length] as number;
      const upstream = connect(port, "127.0.0.1");
      let connected = false;
      upstream.once("error", () => {
        // Refused before anything was relayed: the next upstream gets the connection.
        if (!connected && !client.destroyed) attempt();
      });
      upstream.once("connect", () => {
        connected = true;
        next += 1;
        open.add(upstream);
        upstream.on("close", () => {
          open.delete(upstream);
          client.destroy();
        });
        upstream.on("error", () => client.destroy());
        client.on("close", () => upstream.destroy());
        client.pipe(upstream).pipe(client);
        client.resume();
      });
    };
    attempt();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("the balancer has no TCP address");
  balancer.url = `http://127.0.0.1:${address.port}`;
  balancer.close = () =>
    new Promise<void>((resolve) => {
      for (const socket of open) socket.destroy();
      server.close(() => resolve());
    });
  return balancer;
}
