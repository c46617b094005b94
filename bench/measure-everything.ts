/**
 * `Patient/{id}/$everything` against a plain search, side by side, on the memory and file stores:
 * loads the hospital and practitioner bundles and the first `PATIENTS` patient bundles of the Synthea
 * sample (`../shared/data/synthea-r4-100`, or `FPK_SYNTHEA_DIR`) into a project, then for each
 * patient times, alternately, the full `$everything` walk (pages of 1000), its first page of 100,
 * and the first page of `Observation?patient=<id>&_count=100`; then the first page of 100 of the
 * type-level `Patient/$everything`. Prints medians per store.
 *
 *   node --import tsx bench/measure-everything.ts
 */
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import { fhirRouter } from '../src/fhir/router.js';
import type { Principal } from '../src/http/principal.js';
import type { Storage } from '../src/storage/types.js';
import { fileStorage, memoryStorage } from '../src/stores.js';
import { expectJson } from './http-json.js';
import { syntheaBundleFiles } from './measure-transactions.js';
import { median, now } from './stats.js';

const DIR = process.env.FPK_SYNTHEA_DIR ?? path.resolve('../shared/data/synthea-r4-100');
const PATIENTS = Number(process.env.PATIENTS ?? 10);
const REPS = Number(process.env.REPS ?? 5);

const principal: Principal = {
  kind: 'client',
  id: 'bench',
  projectId: 'bench',
  scopes: ['system/*.*'],
  admin: false,
  superAdmin: false,
};

async function measure(name: string, storage: Storage): Promise<void> {
  await storage.createProject({ id: 'bench', name: 'Bench', strictMode: false });
  const app = express();
  app.use('/fhir', fhirRouter({ storage, authenticate: () => principal, onError: () => undefined }));
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/fhir`;
  try {
    const files = syntheaBundleFiles(DIR);
    const shared = files.filter((f) => !/_[0-9a-f]{8}-/.test(path.basename(f)));
    const patients = files.filter((f) => /_[0-9a-f]{8}-/.test(path.basename(f))).slice(0, PATIENTS);
    const ids: string[] = [];
    for (const file of [...shared, ...patients]) {
      const answer = await expectJson(200, base, {
        method: 'POST',
        headers: { 'content-type': 'application/fhir+json', prefer: 'return=minimal' },
        body: fs.readFileSync(file),
      });
      const entries = (answer.body as { entry: { response: { location?: string } }[] }).entry;
      const patient = entries.map((e) => e.response.location ?? '').find((l) => l.startsWith('Patient/'));
      if (patients.includes(file) && patient) ids.push(patient.split('/')[1]!);
    }
    const walk = async (id: string): Promise<number> => {
      let url: string | undefined = `${base}/Patient/${id}/$everything?_count=1000`;
      let count = 0;
      while (url) {
        const page = (await expectJson(200, url)).body as {
          entry: unknown[];
          link: { relation: string; url: string }[];
        };
        count += page.entry.length;
        url = page.link.find((l) => l.relation === 'next')?.url;
      }
      return count;
    };
    const whole: number[] = [];
    const first: number[] = [];
    const search: number[] = [];
    let resources = 0;
    for (let rep = 0; rep < REPS; rep++) {
      for (const id of ids) {
        let t = now();
        const n = await walk(id);
        whole.push(now() - t);
        if (rep === 0) resources += n;
        t = now();
        await expectJson(200, `${base}/Patient/${id}/$everything?_count=100`);
        first.push(now() - t);
        t = now();
        await expectJson(200, `${base}/Observation?patient=${id}&_count=100`);
        search.push(now() - t);
      }
    }
    const typeLevel: number[] = [];
    for (let rep = 0; rep < REPS; rep++) {
      const t = now();
      await expectJson(200, `${base}/Patient/$everything?_count=100`);
      typeLevel.push(now() - t);
    }
    const ms = (v: number) => `${v.toFixed(1)} ms`;
    console.log(
      `${name}: ${ids.length} patients, ${(resources / ids.length).toFixed(0)} resources each on average;` +
        ` medians over ${REPS} rounds: whole $everything walk ${ms(median(whole))},` +
        ` first page of 100 ${ms(median(first))}, Observation?patient= first page of 100 ${ms(median(search))},` +
        ` Patient/$everything first page of 100 ${ms(median(typeLevel))}`,
    );
  } finally {
    server.close();
    await storage.close();
  }
}

if (!fs.existsSync(DIR)) {
  console.log(`No Synthea sample at ${DIR} (set FPK_SYNTHEA_DIR)`);
} else {
  await measure('memory', memoryStorage());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-everything-'));
  try {
    await measure('file', await fileStorage({ dir }));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
