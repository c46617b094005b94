import fs from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { Storage } from '../../src/storage/types.js';
import {
  BASE,
  downloadAll,
  expectMatchesStore,
  exportManifest,
  keysOf,
  seed,
  tempDir,
  token,
} from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { testAuthenticate } from '../helpers/test-auth.js';
import { fixtureStorage } from './fixtures/fixture-storage.js';

const DIST = fileURLToPath(new URL('../../dist/', import.meta.url));
const MISSING =
  'dist/ is missing or incomplete: run `npm run build` first (`npm test` builds it through its pretest script)';

function requireDist(): void {
  for (const file of [
    'index.js',
    'index.cjs',
    'postgres.js',
    'postgres.cjs',
    'export-worker.js',
    'export-worker.cjs',
  ]) {
    if (!fs.existsSync(`${DIST}${file}`)) throw new Error(`${MISSING} (no dist/${file})`);
  }
}

interface DistPostgresModule {
  postgresStorage: (options: { connectionString: string; schema: string }) => Storage;
}

interface DistModule {
  bulkExportRouter: (options: Record<string, unknown>) => express.Router & { close(): Promise<void> };
  fileStorage: (options: { dir: string; durability?: 'write' }) => Promise<Storage>;
}

/** A full Patient-level export through the built router, on the fixture store and on the built fileStorage. */
async function flow(mod: DistModule): Promise<void> {
  await flowOn(mod, fixtureStorage({ dir: tempDir() }));
  const file = await mod.fileStorage({ dir: tempDir(), durability: 'write' });
  afterTest(() => file.close());
  // The built store's descriptor points at the built package, which the built worker imports.
  expect(file.descriptor?.module).toMatch(/\/fpk-dist-[^/]+\/index\.c?js$/);
  await flowOn(mod, file);
}

async function flowOn(mod: DistModule, storage: Storage): Promise<void> {
  expect(storage.descriptor).toBeDefined();
  await seed(storage);
  const router = mod.bulkExportRouter({
    storage,
    authenticate: testAuthenticate,
    exportDir: tempDir('bulk-out-'),
    onError: () => undefined,
  });
  afterTest(() => router.close());
  const app = express();
  app.use(BASE, router);
  const auth = token('proj-a');
  const manifest = await exportManifest(app, auth, '/Patient/$export');
  const byType = await downloadAll(app, auth, manifest);
  expect(byType.get('Patient')).toHaveLength(4);
  await expectMatchesStore(storage, 'proj-a', byType);
  // `_typeFilter` parsed at kick-off and matched in the built worker (which loads the registry).
  const filtered = await exportManifest(
    app,
    auth,
    `/Patient/$export?_type=Observation&_typeFilter=${encodeURIComponent('Observation?code:text=a')}`,
  );
  expect(keysOf(await downloadAll(app, auth, filtered))).toEqual(['Observation/o1']);
  expect((await request(app).get(`${BASE}/$export-status/nope`).set('Authorization', auth)).status).toBe(404);
}

/**
 * A copy of dist/ without `missing`, so that only the other worker can run the export. It lives
 * under node_modules/.cache so that the copy still resolves the package's dependencies.
 */
function distWithout(missing: string): string {
  requireDist();
  const parent = fileURLToPath(new URL('../../node_modules/.cache/', import.meta.url));
  fs.mkdirSync(parent, { recursive: true });
  const copy = fs.mkdtempSync(`${parent}fpk-dist-`);
  afterTest(() => fs.rmSync(copy, { recursive: true, force: true }));
  for (const file of fs.readdirSync(DIST)) {
    if (file !== missing && !file.endsWith('.map')) fs.copyFileSync(`${DIST}${file}`, `${copy}/${file}`);
  }
  return `${copy}/`;
}

describe('the built package', () => {
  it('ESM build: exports run in dist/export-worker.js', async () => {
    const dist = distWithout('export-worker.cjs');
    const mod = (await import(pathToFileURL(`${dist}index.js`).href)) as DistModule;
    await flow(mod);
  });

  it('CJS build: exports run in dist/export-worker.cjs', async () => {
    const dist = distWithout('export-worker.js');
    const mod = createRequire(import.meta.url)(`${dist}index.cjs`) as DistModule;
    await flow(mod);
  });
});

// The PostgreSQL adapter is the `fhir-platform-kit/postgres` entry: its descriptor names that
// entry, which the built worker imports. (Without a database the PostgreSQL storage tests say so.)
describe.runIf(POSTGRES_URL)('the built PostgreSQL entry', () => {
  const freshSchema = schemaFactory(POSTGRES_URL!);

  async function pgFlow(mod: DistModule, pgMod: DistPostgresModule, format: RegExp): Promise<void> {
    const storage = pgMod.postgresStorage({ connectionString: POSTGRES_URL!, schema: freshSchema() });
    afterTest(() => storage.close());
    expect(storage.descriptor?.module).toMatch(format);
    await flowOn(mod, storage);
  }

  it('ESM build: dist/postgres.js', async () => {
    requireDist();
    const mod = (await import(pathToFileURL(`${DIST}index.js`).href)) as DistModule;
    const pgMod = (await import(pathToFileURL(`${DIST}postgres.js`).href)) as DistPostgresModule;
    await pgFlow(mod, pgMod, /\/dist\/postgres\.js$/);
  });

  it('CJS build: dist/postgres.cjs', async () => {
    requireDist();
    const load = createRequire(import.meta.url);
    const mod = load(`${DIST}index.cjs`) as DistModule;
    const pgMod = load(`${DIST}postgres.cjs`) as DistPostgresModule;
    await pgFlow(mod, pgMod, /\/dist\/postgres\.cjs$/);
  });
});
