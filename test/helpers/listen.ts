import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';

/** A server listening on the loopback address: its port and origin (`http://127.0.0.1:port`). */
export interface Listening {
  server: http.Server;
  port: number;
  origin: string;
}

/**
 * Starts `target` (a server, or a request handler such as an Express app) on 127.0.0.1, on a port
 * the system picks, and answers once it listens. The caller closes `server`.
 */
export async function listen(target: http.Server | http.RequestListener): Promise<Listening> {
  const server = target instanceof http.Server ? target : http.createServer(target);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return { server, port, origin: `http://127.0.0.1:${port}` };
}
