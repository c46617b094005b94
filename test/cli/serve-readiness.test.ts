// `serve` is ready only when its configured credentials work: a script or load balancer that waits
// for the first 200 of /readyz gets a token with SUPER_ADMIN_CLIENT_ID/SECRET at once.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { afterTest } from '../helpers/cleanup.js';
import { tempDir } from '../helpers/temp-dir.js';
import { postgresTestUrl } from '../helpers/postgres.js';

const REPO = path.resolve(import.meta.dirname, '../..');
const SLOW_HASHING = pathToFileURL(path.join(import.meta.dirname, 'fixtures/slow-secret-hashing.mjs')).href;
const ROOT = { id: 'root', secret: 'root-secret-0123456789' };

function freePort(): Promise<number> {
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
 * `serve` from the source (as `npm start`) in a child process on 127.0.0.1:`port`, with the
 * super-admin credentials set and secret hashing slowed down (fixtures/slow-secret-hashing.mjs).
 * Stopped with SIGTERM after the test.
 */
function startServe(port: number, env: Record<string, string>) {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '--import', SLOW_HASHING, 'src/cli/main.ts', 'serve'],
    {
      cwd: REPO,
      // (vitest sets BASE_URL to '/', which serve would refuse.)
      env: {
        ...process.env,
        BASE_URL: '',
        PORT: String(port),
        HOST: '127.0.0.1',
        SUPER_ADMIN_CLIENT_ID: ROOT.id,
        SUPER_ADMIN_CLIENT_SECRET: ROOT.secret,
        FPK_TEST_SCRYPT_DELAY_MS: '1000',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  let exitCode: number | null | undefined;
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      exitCode = code;
      resolve(code);
    }),
  );
  afterTest(async () => {
    if (exitCode === undefined) child.kill('SIGTERM');
    await exited;
  });
  /** Resolves once the output holds `text`, or the process has exited. */
  const printed = (text: string) =>
    new Promise<void>((resolve) => {
      const look = () => {
        if (!output.includes(text)) return;
        child.stdout.off('data', look);
        resolve();
      };
      child.stdout.on('data', look);
      void exited.then(() => resolve());
      look();
    });
  return { printed, output: () => output, running: () => exitCode === undefined };
}

/** The answers of /readyz, polled back to back until the first 200 (or the server exits). */
async function untilFirstReady(origin: string, running: () => boolean) {
  const notReady: { checks: Record<string, string> }[] = [];
  while (running()) {
    let res: Response;
    try {
      res = await fetch(`${origin}/readyz`);
    } catch {
      continue; // not listening yet
    }
    const body = (await res.json()) as { status: string; checks: Record<string, string> };
    if (res.status === 200) return { ready: body, notReady };
    expect(res.status).toBe(503);
    notReady.push(body);
  }
  return undefined;
}

async function tokenStatus(origin: string): Promise<number> {
  const res = await fetch(`${origin}/oauth2/token`, {
    method: 'POST',
    headers: {
      Authorization: `Basic ${Buffer.from(`${ROOT.id}:${ROOT.secret}`).toString('base64')}`,
      'Content-Type': 'application/x-www-form-urlencoded',
    },
    body: 'grant_type=client_credentials',
  });
  return res.status;
}

/** A new database on the test server, dropped after the test (serve uses its `public` schema). */
async function newDatabase(url: string): Promise<string> {
  const name = `fpk_ready_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  afterTest(async () => {
    const dropper = new pg.Client({ connectionString: url });
    await dropper.connect();
    try {
      await dropper.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    } finally {
      await dropper.end();
    }
  });
  const database = new URL(url);
  database.pathname = `/${name}`;
  return database.href;
}

const postgresUrl = postgresTestUrl('serve: readiness on PostgreSQL');
const stores: [string, () => Promise<Record<string, string>>][] = [
  ['the file store', () => Promise.resolve({})],
  ...(postgresUrl
    ? [
        ['PostgreSQL', async () => ({ DATABASE_URL: await newDatabase(postgresUrl) })] as [
          string,
          () => Promise<Record<string, string>>,
        ],
      ]
    : []),
];

describe('serve: readiness', () => {
  it.each(stores)(
    'on %s, answers /readyz 200 only once the super-admin credentials get a token',
    async (_store, storeEnv) => {
      const port = await freePort();
      const origin = `http://127.0.0.1:${port}`;
      const serve = startServe(port, { DATA_DIR: tempDir('fpk-ready-'), ...(await storeEnv()) });
      // Probes start with the server's start (not while tsx compiles it).
      await serve.printed('starting the standalone server');
      const probes = await untilFirstReady(origin, serve.running);
      expect(probes, serve.output()).toBeDefined();
      // At the first 200, at once: the configured credentials work.
      expect(await tokenStatus(origin), serve.output()).toBe(200);
      expect(probes!.ready.checks).toEqual({
        storage: 'ok',
        exportWorkers: 'ok',
        signingKeys: 'ok',
        superAdmin: 'ok',
      });
      // Every earlier answer named what was not ready yet.
      for (const { checks } of probes!.notReady)
        expect(Object.values(checks).some((status) => status !== 'ok')).toBe(true);
    },
  );
});
