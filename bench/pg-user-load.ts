import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { newUserRecord } from '../src/storage/record-rules.js';
import { userListColumns } from '../src/storage/postgres/user-page.js';
import type { UserRecord } from '../src/storage/types.js';
import { now } from './stats.js';

const quoteIdent = (name: string): string => `"${name.replaceAll('"', '""')}"`;

/** A value in COPY's text format: backslash, tab, newline and carriage return escaped. */
function copyText(value: string | null): string {
  if (value === null) return '\\N';
  return value.replace(/[\\\t\n\r]/g, (c) => ({ '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' })[c]!);
}

/** A PostgreSQL text[] literal of plain strings. */
function arrayLiteral(values: readonly string[]): string {
  return `{${values.map((v) => `"${v.replace(/["\\]/g, (c) => `\\${c}`)}"`).join(',')}}`;
}

/** The bench's user `i`, as `loadUsers` makes it (the profile id is a fresh id: no profile is written). */
export function benchUser(projectId: string, i: number, at: string): UserRecord {
  const email = `user${i}@bench.example`;
  return newUserRecord(
    projectId,
    randomUUID(),
    {
      projectId,
      userName: email,
      externalId: `ext-${i}`,
      userType: 'Practitioner',
      profileId: randomUUID(),
      active: true,
      data: {
        name: { givenName: `Given${i}`, familyName: `Family${i}` },
        emails: [{ value: email, type: 'work', primary: true }],
      },
    },
    at,
  );
}

/**
 * Loads `count` users straight into the `users` table with `COPY … FROM STDIN`, with the columns
 * `createUser` writes (the same record, key, listing columns), for SCIM paging at a million users:
 * the storage API writes a profile, a user and a membership per user, about 50 users/s on a busy
 * machine. Only the users are written: SCIM listing reads nothing else. Times are one millisecond
 * apart, so `createdAt` orders them.
 */
export async function copyUsersIn(options: {
  connectionString: string;
  schema: string;
  projectId: string;
  count: number;
}): Promise<{ ms: number; rows: number }> {
  const client = new pg.Client({ connectionString: options.connectionString });
  await client.connect();
  try {
    const start = now();
    const base = Date.now() - options.count;
    const { projectId, count } = options;
    function* lines(): Generator<string> {
      const batch: string[] = [];
      for (let i = 0; i < count; i++) {
        const at = new Date(base + i).toISOString();
        const user = benchUser(projectId, i, at);
        const columns = userListColumns(user);
        batch.push(
          [
            projectId,
            user.id,
            user.userName.toLowerCase(),
            user.externalId ?? null,
            user.profileId,
            user.createdAt,
            String(user.version),
            JSON.stringify(user),
            columns.updatedAt,
            arrayLiteral(columns.emails),
          ]
            .map(copyText)
            .join('\t') + '\n',
        );
        if (batch.length === 1000) yield batch.splice(0).join('');
      }
      if (batch.length) yield batch.join('');
    }
    const copy = client.query(
      copyFrom(`COPY ${quoteIdent(options.schema)}.users
        (project_id, id, user_name_key, external_id, profile_id, created_at, version, record, updated_at, emails)
        FROM STDIN`),
    );
    await pipeline(Readable.from(lines()), copy);
    await client.query(`ANALYZE ${quoteIdent(options.schema)}.users`);
    return { ms: now() - start, rows: count };
  } finally {
    await client.end();
  }
}
