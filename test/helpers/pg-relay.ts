import net from 'node:net';

/**
 * A TCP relay in front of the test database that can cut every connection and refuse new ones
 * (the database restarted or out of reach), then let them through again.
 */
export class Relay {
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private up = true;

  constructor(private readonly target: { host: string; port: number }) {
    this.server = net.createServer((client) => {
      if (!this.up) {
        client.destroy();
        return;
      }
      const upstream = net.connect(this.target.port, this.target.host);
      const end = () => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
      };
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('error', end).on('close', end);
      }
      client.pipe(upstream).pipe(client);
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return (this.server.address() as net.AddressInfo).port;
  }

  cut(): void {
    this.up = false;
    for (const socket of this.sockets) socket.destroy();
  }

  restore(): void {
    this.up = true;
  }

  close(): Promise<void> {
    this.cut();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
