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
  seed,
  tempDir,
  token,
} from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';
import { testAuthenticate } from '../helpers/test-auth.js';
import { fixtureStorage } from './fixtures/fixture-storage.js';

const DIST = fileURLToPath(new URL('../../dist/', import.meta.url));
const MISSING =
  'dist/ is missing or incomplete: run `npm run build` first (`npm test` builds it through its pretest script)';

function requireDist(): void {
  for (const file of ['index.js', 'index.cjs', 'export-worker.js']) {
    if (!fs.existsSync(`${DIST}${file}`)) throw new Error(`${MISSING} (no dist/${file})`);
  }
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
  expect(file.descriptor?.module).toMatch(/\/dist\/index\.c?js$/);
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
  expect((await request(app).get(`${BASE}/$export-status/nope`).set('Authorization', auth)).status).toBe(404);
}

describe('the built package', () => {
  it('ESM build: exports run in dist/export-worker.js', async () => {
    requireDist();
    const mod = (await import(pathToFileURL(`${DIST}index.js`).href)) as DistModule;
    await flow(mod);
  });

  it('CJS build: finds the same ESM worker next to dist/index.cjs', async () => {
    requireDist();
    const mod = createRequire(import.meta.url)(`${DIST}index.cjs`) as DistModule;
    await flow(mod);
  });
});
