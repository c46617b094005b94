import path from 'node:path';
import { CONNECTION_STRING_FORMS, connectionStringProblem, withoutPassword } from './database-url.js';
import type { ServeSetting } from './serve-setting.js';
import { historyRetention, integer, oneOf } from './setting-readers.js';

/** The settings of the store: PostgreSQL's connections and timeouts, replicas, backups, history (in `--help` order). */
export const STORE_SETTINGS = {
  databaseUrl: {
    env: 'DATABASE_URL',
    flag: '--database-url <url>',
    description:
      'a PostgreSQL connection string (`postgres://user:password@host:5432/database`, `postgresql://…` or `socket:/path?db=database`): store everything there instead of the file store (several instances can share it)',
    read: (text, invalid) => {
      if (text === undefined) return undefined;
      const problem = connectionStringProblem(text);
      return problem ? invalid(CONNECTION_STRING_FORMS, problem) : text;
    },
    quote: withoutPassword,
  },
  databaseMaxConnections: {
    env: 'DATABASE_MAX_CONNECTIONS',
    flag: '--database-max-connections <n>',
    defaultText: '10',
    description: "connections of the store's pool (at least 2)",
    store: 'postgres',
    read: integer(10, 2),
  },
  databaseSearchConnections: {
    env: 'DATABASE_SEARCH_CONNECTIONS',
    flag: '--database-search-connections <n>',
    defaultText: '7 (the pool less 30%, at least 2)',
    description:
      'connections of the pool searches and history listings may hold at once, all projects together; the others stay free for reads, writes, tokens and `/readyz` (less than `DATABASE_MAX_CONNECTIONS`; [docs/deployment.md](docs/deployment.md#database-settings-and-pool-sizes))',
    store: 'postgres',
    read: (text, invalid) => (text === undefined ? undefined : integer(1, 1)(text, invalid)),
  },
  databaseMaxProjectSearchConnections: {
    env: 'DATABASE_MAX_PROJECT_SEARCH_CONNECTIONS',
    flag: '--database-max-project-search-connections <n>',
    defaultText: '3 (half of `DATABASE_SEARCH_CONNECTIONS`)',
    description:
      "how many of those one project's searches may hold at once; its others wait in turn (at most `DATABASE_SEARCH_CONNECTIONS`)",
    store: 'postgres',
    read: (text, invalid) => (text === undefined ? undefined : integer(1, 1)(text, invalid)),
  },
  databaseAcquireTimeoutMs: {
    env: 'DATABASE_ACQUIRE_TIMEOUT_MS',
    flag: '--database-acquire-timeout-ms <ms>',
    defaultText: '10000',
    description:
      'longest wait for a free connection, and for a search without a deadline for room among the search connections; then `503` with `Retry-After` (`0`: no limit)',
    store: 'postgres',
    read: integer(10_000, 0),
  },
  databaseLockTimeoutMs: {
    env: 'DATABASE_LOCK_TIMEOUT_MS',
    flag: '--database-lock-timeout-ms <ms>',
    defaultText: '15000',
    description: "PostgreSQL's `lock_timeout` on the store's connections (`0`: no limit)",
    store: 'postgres',
    read: integer(15_000, 0),
  },
  databaseStatementTimeoutMs: {
    env: 'DATABASE_STATEMENT_TIMEOUT_MS',
    flag: '--database-statement-timeout-ms <ms>',
    defaultText: '60000',
    description: "PostgreSQL's `statement_timeout` (exports' `COPY` and cursors are exempt; `0`: no limit)",
    store: 'postgres',
    read: integer(60_000, 0),
  },
  databaseIdleInTransactionTimeoutMs: {
    env: 'DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS',
    flag: '--database-idle-in-transaction-timeout-ms <ms>',
    defaultText: '60000',
    description: "PostgreSQL's `idle_in_transaction_session_timeout` (`0`: no limit)",
    store: 'postgres',
    read: integer(60_000, 0),
  },
  databaseCloseTimeoutMs: {
    env: 'DATABASE_CLOSE_TIMEOUT_MS',
    flag: '--database-close-timeout-ms <ms>',
    defaultText: '10000',
    description: 'how long closing the store waits for calls in flight before it ends their connections',
    store: 'postgres',
    read: integer(10_000, 0),
  },
  databaseReadReplicas: {
    env: 'DATABASE_READ_REPLICAS',
    flag: '--database-read-replicas <urls>',
    description:
      'connection strings of streaming replicas, comma-separated: reads run there once they have replayed the writes they must see ([docs/deployment.md](docs/deployment.md#read-replicas))',
    store: 'postgres',
    read: (text, invalid) => {
      if (text === undefined) return undefined;
      const urls = text.split(',').map((url) => url.trim());
      const expected = `a comma-separated list of connection strings, each ${CONNECTION_STRING_FORMS}`;
      if (urls.some((url) => url === '')) invalid(expected, 'has an empty entry');
      for (const url of urls) {
        const problem = connectionStringProblem(url);
        if (problem) invalid(expected, `has an entry that ${problem}: "${withoutPassword(url)}"`);
      }
      return urls;
    },
    quote: (text) => text.split(',').map(withoutPassword).join(','),
  },
  databaseReplicaFreshness: {
    env: 'DATABASE_REPLICA_FRESHNESS',
    flag: '--database-replica-freshness <which>',
    defaultText: 'instance',
    description:
      "what a replica must have replayed to serve a read: this instance's writes (`instance`), or every commit the primary had made (`primary`: clients read their writes through any instance)",
    store: 'postgres',
    read: (text, invalid) => oneOf(['instance', 'primary'] as const)(text, invalid) ?? 'instance',
  },
  backupDir: {
    env: 'BACKUP_DIR',
    flag: '--backup-dir <dir>',
    description:
      'each `kill -USR2 <pid>` writes a backup of the running file store into a new directory here ([docs/file-store.md](docs/file-store.md#backups))',
    store: 'file',
    read: (text) => (text === undefined ? undefined : path.resolve(text)),
  },
  history: {
    env: 'HISTORY',
    flag: '--history <retention>',
    defaultText: 'all',
    description:
      'old versions the store keeps for `vread` and `_history`: `all`, `versions:<n>` (the last n of each resource) or `days:<n>` (those superseded less than n days ago) ([docs/storage.md](docs/storage.md#versions-and-history))',
    read: historyRetention,
  },
} satisfies Record<string, ServeSetting<unknown>>;
