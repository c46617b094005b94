import fs from 'node:fs';
import path from 'node:path';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import type { Storage } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import { PATIENCE_MS } from '../helpers/eventually.js';
import {
  bulkTestApp,
  openWithProjects,
  download,
  exportManifest,
  kickoff,
  pathOf,
  sampleResources,
  tempDir,
  type BulkTestApp,
} from '../helpers/bulk-export.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';
import { slowExports } from '../helpers/slow-exports.js';

// `allowPartialManifests` (Bulk Data 3.0.0): while the job runs, the status answers 202 with a
// manifest of the files already whole; a page never changes once answered but for a `next` link
// added when more files are ready; the last page of a completed job has no link.

interface Page {
  status: number;
  body: {
    transactionTime: string;
    request: string;
    output: { type: string; url: string; count: number }[];
    error: unknown[];
    link?: { relation: string; url: string }[];
  };
}

type App = BulkTestApp<Storage>['app'];

async function getPage(app: App, auth: string, url: string): Promise<Page | undefined> {
  const res = await request(app).get(url).set('Authorization', auth);
  if (res.status === 202 && res.text === '') return undefined;
  expect([200, 202], res.text).toContain(res.status);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  if (res.status === 202) {
    expect(res.headers['retry-after']).toMatch(/^\d+$/);
    expect(res.headers['x-progress']).toBeTruthy();
  }
  // supertest connects on a new port each time: URLs are compared by path.
  return {
    status: res.status,
    body: JSON.parse(res.text.replace(/http:\/\/127\.0\.0\.1:\d+/g, 'http://127.0.0.1')) as Page['body'],
  };
}

/** Polls `url` until `done` holds for its page (a page answered, or more). */
async function pollPage(app: App, auth: string, url: string, done: (page: Page) => boolean): Promise<Page> {
  const started = Date.now();
  for (;;) {
    const page = await getPage(app, auth, url);
    if (page && done(page)) return page;
    if (Date.now() - started > PATIENCE_MS) throw new Error('the manifest page never came');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * Reads the manifest as a client does: each page until it links to the next (or the job is done),
 * then the next; every page answered is checked again at the end, unchanged but for its link and
 * (once the job is done) its error files. Returns the pages.
 */
async function readAllPages(app: App, auth: string, statusPath: string): Promise<Page[]> {
  const pages: Page[] = [];
  let url = statusPath;
  for (;;) {
    const page = await pollPage(app, auth, url, (p) => p.status === 200 || p.body.link !== undefined);
    pages.push(page);
    const next = page.body.link?.find((l) => l.relation === 'next')?.url;
    if (!next) break;
    expect(page.body.link).toHaveLength(1);
    url = pathOf(next);
  }
  expect(pages.at(-1)!.status).toBe(200);
  return pages;
}

const urlsOf = (pages: Page[]) => pages.flatMap((p) => p.body.output.map((o) => o.url));

forEachStore('allowPartialManifests', (store, open) =>
  describe(`allowPartialManifests (${store} store)`, () => {
    async function setup(gate?: { file: string; type: string }) {
      const storage = await openWithProjects(open);
      if (gate) slowExports(storage, () => 0, gate);
      // Small files: every resource a file of its own.
      return bulkTestApp({ storage, seed: sampleResources(), maxFileSize: 64 });
    }

    it('pages hold every file of the export once, each whole; the last has no link', async () => {
      const { app, auth } = await setup();
      const target = '/$export?_type=Patient,Observation,Condition';
      const whole = await exportManifest(app, auth, target);
      const statusPath = await kickoff(app, auth, `${target}&allowPartialManifests=true`);
      const pages = await readAllPages(app, auth, statusPath);
      const urls = urlsOf(pages);
      expect(new Set(urls).size).toBe(urls.length);
      expect(urls).toHaveLength(whole.output.length);
      const keys: string[] = [];
      for (const page of pages) {
        expect(page.body.transactionTime).toBe(pages[0]!.body.transactionTime);
        expect(page.body.request).toBe(pages[0]!.body.request);
        for (const entry of page.body.output) {
          const lines = await download(app, auth, entry.url);
          expect(lines).toHaveLength(entry.count);
          keys.push(...lines.map((r) => `${r.resourceType}/${String(r.id)}`));
        }
      }
      expect(keys.sort()).toEqual([
        'Condition/c1',
        'Observation/o1',
        'Observation/o2',
        'Observation/o3',
        'Observation/o4',
        'Patient/p1',
        'Patient/p2',
        'Patient/p3',
        'Patient/p4',
      ]);
      // Answered again, every page is the same.
      for (const [i, page] of pages.entries()) {
        const again = await getPage(app, auth, i === 0 ? statusPath : `${statusPath}?page=${i + 1}`);
        expect(again).toEqual(page);
      }
      const beyond = await request(app)
        .get(`${statusPath}?page=${pages.length + 1}`)
        .set('Authorization', auth);
      expectOperationOutcome(beyond, 404);
      const malformed = await request(app).get(`${statusPath}?page=first`).set('Authorization', auth);
      expectOperationOutcome(malformed, 400);
    });

    if (store === 'memory') return;

    it('lists the files already whole while the job runs, downloadable; later files come on later pages', async () => {
      const gate = { file: path.join(tempDir('gate-'), 'open'), type: 'Observation' };
      const { app, auth } = await setup(gate);
      const statusPath = await kickoff(
        app,
        auth,
        '/$export?_type=Patient,Observation&allowPartialManifests=true',
      );
      // The Observations are held back: the pages answered while the job runs hold the four
      // Patient files, each page answered the same again but for the link to the next.
      const running: Page[] = [];
      let url = statusPath;
      while (running.flatMap((p) => p.body.output).length < 4) {
        const page = await pollPage(app, auth, url, (p) => p.body.output.length > 0);
        expect(page.status).toBe(202);
        expect(page.body.error).toEqual([]);
        running.push(page);
        const again = await pollPage(
          app,
          auth,
          url,
          (p) => p.body.link !== undefined || running.flatMap((r) => r.body.output).length === 4,
        );
        expect(again.body.output).toEqual(page.body.output);
        if (again.body.link) url = pathOf(again.body.link[0]!.url);
      }
      const early = running.flatMap((p) => p.body.output);
      expect(early.map((o) => o.type)).toEqual(['Patient', 'Patient', 'Patient', 'Patient']);
      for (const entry of early) {
        const lines = await download(app, auth, entry.url);
        expect(lines.map((r) => r.resourceType)).toEqual(['Patient']);
      }
      fs.writeFileSync(gate.file, '');
      const pages = await readAllPages(app, auth, statusPath);
      for (const [i, page] of running.entries()) expect(pages[i]!.body.output).toEqual(page.body.output);
      const later = pages.slice(running.length).flatMap((p) => p.body.output);
      expect(later.map((o) => o.type)).toEqual(['Observation', 'Observation', 'Observation', 'Observation']);
    });
  }),
);

describe('allowPartialManifests, kick-off', () => {
  it('takes a boolean in a POST Parameters body; false or absent keeps the plain 202', async () => {
    const { app, auth } = await bulkTestApp();
    const statusPath = await kickoff(app, auth, '/$export', {
      method: 'post',
      body: {
        resourceType: 'Parameters',
        parameter: [
          { name: '_type', valueString: 'Patient' },
          { name: 'allowPartialManifests', valueBoolean: true },
        ],
      },
    });
    const pages = await readAllPages(app, auth, statusPath);
    expect(urlsOf(pages)).toHaveLength(1);
    const plain = await exportManifest(app, auth, '/$export?_type=Patient&allowPartialManifests=false');
    expect(plain).not.toHaveProperty('link');
    const bad = await request(app)
      .get('/fhir/R4/$export?allowPartialManifests=yes')
      .set('Authorization', auth)
      .set('Prefer', 'respond-async');
    expectOperationOutcome(bad, 400);
  });
});
