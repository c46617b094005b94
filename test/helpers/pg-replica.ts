import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { eventually } from './eventually.js';

/*
 * A real streaming replica of the test database's PostgreSQL, for the read replica tests: a second
 * cluster on another port, made by `pg_basebackup` from the primary (127.0.0.1:5432 in CI) and
 * started with `standby.signal`. Needs the PostgreSQL server binaries (/usr/lib/postgresql/N/bin)
 * and root (the cluster runs as the `postgres` user). The primary must accept replication
 * connections from 127.0.0.1: `allowReplication` adds a trust line for them to its pg_hba.conf and
 * reloads it when none is there (CI runs on a machine of its own, as root).
 */

/** A running replica. */
export interface Replica {
  url: string;
  port: number;
  /** SQL on the replica (as the postgres user). */
  query<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
  /** Stops replaying WAL (reads see the primary as it was), or starts again. */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Waits until the replica has replayed the primary's current position. */
  caughtUp(primary: pg.Pool): Promise<void>;
  /** Stops the server at once (as a crash would). */
  kill(): void;
  /** Starts it again after `kill`. */
  start(): void;
  /** Promotes it to a primary of its own (it leaves recovery). */
  promote(): void;
  /** Stops it and removes its files. */
  destroy(): Promise<void>;
}

/** The directory of the PostgreSQL server binaries of the primary's major version, if installed. */
function serverBin(major: string): string | undefined {
  const dir = `/usr/lib/postgresql/${major}/bin`;
  return fs.existsSync(path.join(dir, 'pg_basebackup')) ? dir : undefined;
}

/** Why a replica cannot be made here, or undefined when it can. */
export async function replicaUnavailable(primaryUrl: string): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return 'the replica tests run as root (the cluster runs as postgres)';
  const admin = new pg.Client({ connectionString: primaryUrl });
  try {
    await admin.connect();
    const { rows } = await admin.query<{ v: string }>(`SELECT current_setting('server_version_num') AS v`);
    const major = String(Math.floor(Number(rows[0]!.v) / 10000));
    if (!serverBin(major))
      return `no PostgreSQL ${major} server binaries in /usr/lib/postgresql/${major}/bin`;
    return undefined;
  } finally {
    await admin.end();
  }
}

/** Lets 127.0.0.1 open replication connections to the primary (trust), reloading its configuration. */
async function allowReplication(admin: pg.Client): Promise<void> {
  const { rows } = await admin.query<{ hba_file: string }>('SHOW hba_file');
  const hba = rows[0]!.hba_file;
  const text = fs.readFileSync(hba, 'utf8');
  if (/^\s*host\s+replication\s+all\s+127\.0\.0\.1\/32\s+trust/m.test(text)) return;
  fs.appendFileSync(
    hba,
    '\n# fhir-platform-kit tests: streaming replicas on this machine\nhost replication all 127.0.0.1/32 trust\n',
  );
  await admin.query('SELECT pg_reload_conf()');
}

function asPostgres(bin: string, args: string[]): string {
  return execFileSync('runuser', ['-u', 'postgres', '--', bin, ...args], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/**
 * Makes and starts a streaming replica of the primary at `primaryUrl` (host and port read from
 * it), on a free port. Takes as long as copying the primary's data directory.
 */
export async function startReplica(primaryUrl: string): Promise<Replica> {
  const primary = new URL(primaryUrl);
  const admin = new pg.Client({ connectionString: primaryUrl });
  await admin.connect();
  let major: string;
  // A standby needs these at least as high as on the primary.
  const same = [
    'max_connections',
    'max_worker_processes',
    'max_wal_senders',
    'max_prepared_transactions',
    'max_locks_per_transaction',
  ];
  const settings: string[] = [];
  try {
    const { rows } = await admin.query<{ v: string }>(`SELECT current_setting('server_version_num') AS v`);
    major = String(Math.floor(Number(rows[0]!.v) / 10000));
    for (const name of same) {
      const { rows: value } = await admin.query<{ v: string }>('SELECT current_setting($1) AS v', [name]);
      settings.push(`${name} = ${value[0]!.v}`);
    }
    await allowReplication(admin);
  } finally {
    await admin.end();
  }
  const bin = serverBin(major)!;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-replica-'));
  const data = path.join(dir, 'data');
  fs.chownSync(dir, ...postgresIds());
  const port = 40000 + (process.pid % 20000);
  asPostgres(path.join(bin, 'pg_basebackup'), [
    '-h',
    primary.hostname,
    '-p',
    primary.port || '5432',
    '-U',
    decodeURIComponent(primary.username || 'postgres'),
    '-D',
    data,
    '-X',
    'stream',
    '-R',
    '--checkpoint=fast',
  ]);
  // The Debian layout keeps postgresql.conf and pg_hba.conf outside the data directory.
  fs.writeFileSync(
    path.join(data, 'postgresql.conf'),
    [
      `port = ${port}`,
      "listen_addresses = '127.0.0.1'",
      `unix_socket_directories = '${dir}'`,
      'hot_standby = on',
      ...settings,
      "shared_buffers = '32MB'",
      'fsync = off',
    ].join('\n') + '\n',
  );
  fs.writeFileSync(path.join(data, 'pg_hba.conf'), 'local all all trust\nhost all all 127.0.0.1/32 trust\n');
  fs.writeFileSync(path.join(data, 'pg_ident.conf'), '');
  for (const file of ['postgresql.conf', 'pg_hba.conf', 'pg_ident.conf'])
    fs.chownSync(path.join(data, file), ...postgresIds());
  const pgCtl = (...args: string[]) => asPostgres(path.join(bin, 'pg_ctl'), ['-D', data, ...args]);
  const start = () => {
    pgCtl('-l', path.join(dir, 'log'), '-w', '-t', '60', 'start');
  };
  try {
    start();
  } catch (error) {
    const log = fs.existsSync(path.join(dir, 'log')) ? fs.readFileSync(path.join(dir, 'log'), 'utf8') : '';
    fs.rmSync(dir, { recursive: true, force: true });
    throw new Error(`the replica did not start: ${log.slice(-2000)}`, { cause: error });
  }
  const url = `postgres://postgres@127.0.0.1:${port}/${primary.pathname.slice(1) || 'postgres'}`;
  const query = async <R extends pg.QueryResultRow>(text: string, values?: unknown[]) => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      return await client.query<R>(text, values);
    } finally {
      await client.end();
    }
  };
  let running = true;
  return {
    url,
    port,
    query,
    pauseReplay: async () => {
      await query('SELECT pg_wal_replay_pause()');
    },
    resumeReplay: async () => {
      await query('SELECT pg_wal_replay_resume()');
    },
    caughtUp: async (primaryPool) => {
      const { rows } = await primaryPool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
      await eventually(
        'the replica to catch up',
        async () => {
          const { rows: r } = await query<{ ok: boolean }>(
            'SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok',
            [rows[0]!.lsn],
          );
          return r[0]!.ok;
        },
        { intervalMs: 50 },
      );
    },
    kill: () => {
      pgCtl('-m', 'immediate', '-w', 'stop');
      running = false;
    },
    start: () => {
      start();
      running = true;
    },
    promote: () => {
      pgCtl('-w', 'promote');
    },
    destroy: async () => {
      if (running) {
        try {
          pgCtl('-m', 'immediate', '-w', 'stop');
        } catch {
          // already stopped
        }
      }
      fs.rmSync(dir, { recursive: true, force: true });
      await Promise.resolve();
    },
  };
}

function postgresIds(): [number, number] {
  const line = fs
    .readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('postgres:'));
  if (!line) throw new Error('no postgres user');
  const [, , uid, gid] = line.split(':');
  return [Number(uid), Number(gid)];
}
