// SCIM list paging alone, on one store: `node --import tsx bench/scim-pages.ts --store file --users 100000`
// (`--store postgres --copy --users 1000000` loads the users with COPY: bench/pg-user-load.ts).
// Loads the users through the storage API (as `npm run bench` does), then walks every page of 100
// over HTTP and asks pages at random startIndexes (measureScimPages). Prints one JSON object.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { measureScimPages } from './measure-scim.js';
import { startServer } from './server-process.js';

const { values } = parseArgs({
  options: {
    store: { type: 'string', default: 'file' },
    users: { type: 'string', default: '100000' },
    'page-size': { type: 'string', default: '100' },
    'database-url': { type: 'string' },
    // PostgreSQL: load the users with COPY (users only, no profiles) instead of the storage API.
    copy: { type: 'boolean', default: false },
    // V8 CPU profiles of the server process in this directory (`--cpu-prof`).
    profile: { type: 'string' },
  },
});
const store = values.store;
if (store !== 'file' && store !== 'memory' && store !== 'postgres')
  throw new Error('--store: file, memory or postgres');
const users = Number(values.users);
const databaseUrl =
  values['database-url'] ?? process.env.FPK_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-scim-pages-'));
const exportDir = path.join(work, 'exports');
const probeDir = path.join(work, 'probes');
fs.mkdirSync(probeDir);
const server = await startServer({
  store,
  dir: path.join(work, 'store'),
  exportDir,
  probeDir,
  ...(store === 'postgres' ? { databaseUrl } : {}),
  ...(values.profile ? { profileDir: path.resolve(values.profile) } : {}),
});
try {
  const project = await server.call('newProject', { name: 'scim', strict: false });
  console.error(`[scim-pages] ${store}: loading ${users} users`);
  const load = await server.call('loadUsers', {
    projectId: project.projectId,
    count: users,
    batchSize: 1000,
    copy: values.copy,
  });
  console.error(`[scim-pages] ${store}: loaded in ${Math.round(load.ms)} ms; walking`);
  const figures = await measureScimPages({
    scimBase: `${server.info.origin}/scim/v2`,
    token: project.token,
    users,
    pageSize: Number(values['page-size']),
  });
  console.log(JSON.stringify({ store, loadMs: Math.round(load.ms), ...figures }, null, 2));
} finally {
  await server.close();
  fs.rmSync(work, { recursive: true, force: true });
}
