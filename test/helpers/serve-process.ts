import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { PATIENCE_MS } from './eventually.js';

/** The repository root (where `npm start` runs). */
const ROOT = path.resolve(import.meta.dirname, '../..');

/** What the super-admin client of a {@link startServe} server is. */
export const SUPER_ADMIN = { id: 'root', secret: 'root-secret-123' } as const;

/** A `fhir-platform-kit serve` child process. */
export interface ServeProcess {
  /** `http://127.0.0.1:<port>`, also its configured `BASE_URL`. */
  origin: string;
  /** `${origin}/fhir/R4`. */
  fhir: string;
  /** The last 64 KiB it wrote (stdout and stderr), for failure messages. */
  output(): string;
  /** SIGTERM, then waits for the exit (SIGKILL if it does not exit within the patience). */
  close(): Promise<void>;
}

/** A free loopback port (a small race with other processes, as for any test server). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

/**
 * Starts `serve` as `npm start` runs it (`node --import tsx src/cli/main.ts serve`) in a child
 * process on a free loopback port, with the super-admin client {@link SUPER_ADMIN}: the file store
 * under `dataDir`, or PostgreSQL at `databaseUrl`. Resolves once it logs its `listening` line.
 */
export async function startServe(options: {
  dataDir: string;
  databaseUrl?: string;
  env?: Record<string, string>;
}): Promise<ServeProcess> {
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'serve'], {
    cwd: ROOT,
    env: {
      ...process.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      BASE_URL: origin,
      DATA_DIR: options.dataDir,
      SUPER_ADMIN_CLIENT_ID: SUPER_ADMIN.id,
      SUPER_ADMIN_CLIENT_SECRET: SUPER_ADMIN.secret,
      ...(options.databaseUrl ? { DATABASE_URL: options.databaseUrl } : {}),
      ...options.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString()).slice(-64 * 1024);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await listening(child, () => output);
  } catch (error) {
    child.kill('SIGKILL');
    await exited;
    throw error;
  }
  return {
    origin,
    fhir: `${origin}/fhir/R4`,
    output: () => output,
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), PATIENCE_MS);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Resolves on the `listening` log line; rejects if the process exits first or never says it. */
function listening(child: ChildProcess, output: () => string): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      done();
      reject(new Error(`serve did not start within ${PATIENCE_MS} ms:\n${output()}`));
    }, PATIENCE_MS);
    const onData = (): void => {
      if (output().includes('"msg":"listening"')) {
        done();
        resolve();
      }
    };
    const onExit = (code: number | null): void => {
      done();
      reject(new Error(`serve exited (${String(code)}) before listening:\n${output()}`));
    };
    const done = (): void => {
      clearTimeout(timer);
      child.stdout?.off('data', onData);
      child.off('exit', onExit);
    };
    child.stdout?.on('data', onData);
    child.once('exit', onExit);
  });
}
