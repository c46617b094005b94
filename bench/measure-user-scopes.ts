/**
 * What SMART user scopes cost per request: the same searches and reads with a system client token
 * (no limit), a Practitioner user token (`user/*.rs`: the project, through the user's storage view)
 * and a Patient user token (`user/*.rs`: its own compartment, added to the store's search), timed
 * back to back in alternating rounds on one in-process server over HTTP.
 *
 *   npx tsx bench/measure-user-scopes.ts [patients=200] [observationsPerPatient=50] [rounds=20]
 *
 * Prints per request kind the median latency of each token and the median over rounds of the
 * round's ratio to the client token.
 */
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import { issueAccessToken } from '../src/auth/access/access-token.js';
import { signingKeys } from '../src/auth/keys/signing-keys.js';
import { fhirPlatform } from '../src/platform.js';
import { memoryStorage } from '../src/stores.js';
import type { FhirResource } from '../src/storage/types.js';
import { median, now } from './stats.js';

const [patients = 200, perPatient = 50, rounds = 20] = process.argv.slice(2).map(Number);
const PER_ROUND = 25;
const ISSUER = 'http://bench.test';

const storage = memoryStorage();
const exportDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-user-scopes-'));
const platform = fhirPlatform({
  exportDir,
  storage,
  baseUrl: ISSUER,
  token: { rateLimit: false },
  onError: () => undefined,
});
const app = express();
app.use(platform.router);
const server = app.listen(0);
const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

await storage.createProject({ id: 'bench', name: 'bench', strictMode: false });
const client = await storage.createClient({
  id: 'bench-app',
  projectId: 'bench',
  name: 'app',
  scope: 'system/*.rs user/*.rs',
  admin: false,
  superAdmin: false,
});
const writes: { op: 'update'; resource: FhirResource & { id: string } }[] = [];
for (let p = 0; p < patients; p++) {
  writes.push({ op: 'update', resource: { resourceType: 'Patient', id: `pat-${p}` } });
  for (let o = 0; o < perPatient; o++)
    writes.push({
      op: 'update',
      resource: {
        resourceType: 'Observation',
        id: `obs-${p}-${o}`,
        status: 'final',
        code: { coding: [{ system: 'http://loinc.org', code: o % 2 ? '8867-4' : '9279-1' }] },
        subject: { reference: `Patient/pat-${p}` },
      },
    });
}
for (let i = 0; i < writes.length; i += 5000)
  await storage.writeResources('bench', writes.slice(i, i + 5000));
await storage.createUser('bench', {
  id: 'u-pat',
  projectId: 'bench',
  userName: 'pat',
  userType: 'Patient',
  profileId: 'pat-7',
  active: true,
  data: {},
});
await storage.createUser('bench', {
  id: 'u-doc',
  projectId: 'bench',
  userName: 'doc',
  userType: 'Practitioner',
  profileId: 'doc-1',
  active: true,
  data: {},
});

const keys = signingKeys(storage);
const issue = async (scopes: string[], user?: { id: string; fhirUser: string }) =>
  (
    await issueAccessToken(keys, {
      client,
      scopes,
      issuer: ISSUER,
      audience: ISSUER,
      lifetime: 3600,
      ...(user ? { user } : {}),
    })
  ).token;
const tokens = {
  client: await issue(['system/*.rs']),
  practitioner: await issue(['user/*.rs'], { id: 'u-doc', fhirUser: 'Practitioner/doc-1' }),
  patient: await issue(['user/*.rs'], { id: 'u-pat', fhirUser: 'Patient/pat-7' }),
};
const requests = {
  'search first page (_count=20)': '/fhir/R4/Observation?_count=20',
  'search by code (_count=20)': '/fhir/R4/Observation?code=http://loinc.org|8867-4&_count=20',
  'read one Observation': '/fhir/R4/Observation/obs-7-3',
};

async function time(token: string, path: string): Promise<number> {
  const start = now();
  const res = await fetch(`${origin}${path}`, { headers: { authorization: `Bearer ${token}` } });
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`${path}: ${res.status}`);
  return now() - start;
}

type Kind = keyof typeof tokens;
const kinds = Object.keys(tokens) as Kind[];
console.log(
  `user scopes: ${patients} patients, ${patients * perPatient} Observations, memory store, ${rounds} rounds of ${PER_ROUND}`,
);
for (const [name, path] of Object.entries(requests)) {
  const all: Record<Kind, number[]> = { client: [], practitioner: [], patient: [] };
  const ratios: Record<Kind, number[]> = { client: [], practitioner: [], patient: [] };
  for (const kind of kinds) for (let i = 0; i < 10; i++) await time(tokens[kind], path);
  for (let round = 0; round < rounds; round++) {
    const medians = {} as Record<Kind, number>;
    for (const kind of kinds) {
      const ms: number[] = [];
      for (let i = 0; i < PER_ROUND; i++) ms.push(await time(tokens[kind], path));
      all[kind].push(...ms);
      medians[kind] = median(ms);
    }
    for (const kind of kinds) ratios[kind].push(medians[kind] / medians.client);
  }
  console.log(
    `${name}: ${kinds.map((k) => `${k} ${median(all[k]).toFixed(2)} ms (x${median(ratios[k]).toFixed(2)})`).join(', ')}`,
  );
}
server.close();
await platform.close();
await storage.close();
fs.rmSync(exportDir, { recursive: true, force: true });
