import { fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import express from 'express';
import request from 'supertest';
import { afterAll, describe, expect, it } from 'vitest';
import { ExportPool } from '../../src/bulk/export-pool.js';
import { bulkExportRouter } from '../../src/bulk/router.js';
import type { HistoryEntry, HistoryQuery, Storage } from '../../src/storage/types.js';
import { fileStorage } from '../../src/stores.js';
import { collectNdjson } from '../../src/testing/storage-contract.js';
import { eventually, PATIENCE_MS } from '../helpers/eventually.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

const fixture = fileURLToPath(new URL('./fixtures/kill-writer.ts', import.meta.url));
const ROUNDS = Number(process.env.KILL_TEST_ROUNDS ?? 20);
/**
 * Rounds with HTTP exports in flight: every round in the soak mode (`KILL_TEST_ROUNDS`), every
 * fourth in CI (each costs the restart's wait for the export to end).
 */
const httpExportsIn = (round: number): boolean =>
  process.env.KILL_TEST_ROUNDS !== undefined || round % 4 === 0;

interface Acked {
  pairs: Set<string>;
  resources: Set<string>;
  users: Set<string>;
  counters: Map<string, number>;
  /** Every acknowledged value of each counter, with its round. */
  counterValues: Map<string, { n: number; round: number }[]>;
  members: Set<string>;
  jobs: Map<string, number>;
  /** Observations of acknowledged NDJSON uploads. */
  ndjson: Set<string>;
  /** Acknowledged transactions: Encounter id -> its Observations' ids. */
  bundles: Map<string, string[]>;
  /** Users whose PATCH-shaped update (deactivated, data replaced) was acknowledged. */
  patched: Set<string>;
  /** Exports read whole through a snapshot. */
  exports: number;
  /** Users created over SCIM (HTTP 201). */
  scimUsers: Set<string>;
  /** Of them, those whose SCIM PATCH (`active: false`) was answered 200. */
  scimPatched: Set<string>;
  /** Status paths of HTTP exports kicked off (202) and not yet downloaded whole. */
  inFlight: Set<string>;
  /** HTTP exports downloaded whole in the writer. */
  httpExports: number;
  /** Exports in flight at a kill: completed on restart, or answered a failure. */
  resumed: { completed: number; failed: number; rounds: number };
  /** HTTP requests the writers had answered (each acknowledgement of an HTTP loop). */
  httpAnswers: number;
}

const AUTH = testToken({ projectId: 'p1', scopes: ['system/*.*'] });

/**
 * Each export in flight at the kill, after the restart: its status must end as
 * a completed export whose files download whole, or as a failure in an OperationOutcome; never
 * stay in progress.
 */
async function checkInFlight(
  storage: Storage,
  exportDir: string,
  acked: Acked,
  pool: ExportPool,
): Promise<void> {
  if (acked.inFlight.size === 0) return;
  acked.resumed.rounds += 1;
  const router = bulkExportRouter({
    pool,
    storage,
    authenticate: testAuthenticate,
    exportDir,
    onError: () => undefined,
  });
  const app = express().use('/fhir', router);
  try {
    await router.ready;
    for (const status of acked.inFlight) {
      const res = await eventually(
        `export ${status} to end after the restart`,
        async () => {
          const answer = await request(app).get(status).set('Authorization', AUTH);
          return answer.status !== 202 && answer;
        },
        { intervalMs: 100 },
      );
      if (res.status === 200) {
        const manifest = JSON.parse(res.text) as { output: { url: string; count: number }[] };
        for (const file of manifest.output) {
          const body = await request(app)
            .get(new URL(file.url).pathname)
            .set('Authorization', AUTH)
            .buffer(true);
          expect(body.status).toBe(200);
          const ids = String(body.text)
            .split('\n')
            .filter(Boolean)
            .map((l) => (JSON.parse(l) as { id: string }).id);
          expect(ids).toHaveLength(file.count);
          expect(new Set(ids).size).toBe(ids.length);
        }
        acked.resumed.completed += 1;
        await request(app).delete(status).set('Authorization', AUTH).expect(202);
      } else {
        expect(res.status).toBeGreaterThanOrEqual(400);
        expect((res.body as { resourceType?: string }).resourceType).toBe('OperationOutcome');
        acked.resumed.failed += 1;
      }
    }
    acked.inFlight.clear();
  } finally {
    await router.close();
  }
}

/** Every page of a history. */
async function wholeHistory(storage: Storage, query: HistoryQuery): Promise<HistoryEntry[]> {
  const entries: HistoryEntry[] = [];
  let cursor: string | undefined;
  do {
    const page = await storage.readHistory('p1', { ...query, ...(cursor ? { cursor } : {}) });
    entries.push(...page.entries);
    cursor = page.next;
  } while (cursor);
  return entries;
}

/**
 * The histories after a restart: each counter's versions whole and in order, with no gap from the
 * current one down, holding every acknowledged value still in their range, and every one
 * acknowledged since the last round that compacted (odd rounds keep the last 3 versions and
 * compact); Observations are written once each, so their type history has one entry per
 * Observation. Answers the number of counter versions checked.
 */
async function checkHistory(
  storage: Storage,
  acked: Acked,
  round: number,
  observations: number,
): Promise<number> {
  const lastCompacting = round % 2 === 1 ? round : round - 1;
  let checked = 0;
  for (const [id, values] of acked.counterValues) {
    const current = await storage.readResource('p1', 'Basic', id);
    const entries = await wholeHistory(storage, { type: 'Basic', id, count: 500 });
    expect(entries[0]!.resource).toEqual(current);
    const top = Number(current.meta.versionId);
    entries.forEach((e, i) => {
      expect(e.versionId, `${id} versions`).toBe(String(top - i));
      expect(e.resource?.meta.versionId).toBe(e.versionId);
      expect(e.method).toBe(e.versionId === '1' ? 'POST' : 'PUT');
      if (i > 0) {
        expect(e.lastUpdated < entries[i - 1]!.lastUpdated).toBe(true);
        expect((e.resource!.n as number) < (entries[i - 1]!.resource!.n as number)).toBe(true);
      }
    });
    const kept = new Set(entries.map((e) => e.resource!.n as number));
    const oldest = entries.at(-1)!.resource!.n as number;
    for (const v of values) {
      if (v.n >= oldest || v.round > lastCompacting)
        expect(kept.has(v.n), `${id} acknowledged value ${v.n} (round ${v.round})`).toBe(true);
    }
    checked += entries.length;
  }
  const observationHistory = await wholeHistory(storage, { type: 'Observation', count: 1000 });
  expect(observationHistory).toHaveLength(observations);
  expect(observationHistory.every((e) => e.method === 'POST' && e.resource?.id === e.id)).toBe(true);
  return checked;
}

/** Runs the writer until it has acknowledged writes for a random while, then SIGKILLs it. */
function runAndKill(dir: string, round: number, acked: Acked): Promise<void> {
  acked.inFlight.clear();
  return new Promise((resolve, reject) => {
    const child = fork(fixture, [dir, String(round), httpExportsIn(round) ? 'exports' : ''], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    let stderr = '';
    child.stderr?.on('data', (data: Buffer) => (stderr += data.toString()));
    let timer: NodeJS.Timeout | undefined;
    let writes = 0;
    let armed = false;
    const seen = new Set<string>();
    child.on('message', (message: { type: string; id?: string; n?: number; ids?: string[] }) => {
      if (message.type === 'ready') {
        // At the latest: a writer that acknowledges nothing still dies (and the counts below fail);
        // long enough for a loaded machine to acknowledge one write of each kind first.
        timer = setTimeout(() => child.kill('SIGKILL'), PATIENCE_MS);
        return;
      }
      // A random while after the round has acknowledged a write of each kind the final checks
      // count (a plain resource, a transaction pair, a membership), however slow the machine is.
      writes += 1;
      seen.add(message.type);
      if (!armed && ['resource', 'pair', 'member'].every((kind) => seen.has(kind))) {
        armed = true;
        clearTimeout(timer);
        timer = setTimeout(() => child.kill('SIGKILL'), 30 + Math.random() * 250);
      }
      if (message.type === 'resource') acked.resources.add(message.id!);
      if (message.type === 'user') acked.users.add(message.id!);
      if (message.type === 'pair') acked.pairs.add(message.id!);
      if (message.type === 'member') acked.members.add(message.id!);
      if (message.type === 'ndjson') for (const id of message.ids!) acked.ndjson.add(id);
      if (message.type === 'bundle') acked.bundles.set(message.id!, message.ids!);
      if (message.type === 'patch') acked.patched.add(message.id!);
      if (message.type === 'export') acked.exports += 1;
      if (message.type === 'scim-user') acked.scimUsers.add(message.id!);
      if (message.type === 'scim-patch') acked.scimPatched.add(message.id!);
      if (message.type === 'kickoff') acked.inFlight.add(message.id!);
      if (message.type === 'exported') {
        acked.inFlight.delete(message.id!);
        acked.httpExports += 1;
      }
      if (['ndjson', 'bundle', 'scim-user', 'scim-patch', 'kickoff', 'exported'].includes(message.type))
        acked.httpAnswers += 1;
      if (message.type === 'job')
        acked.jobs.set(message.id!, Math.max(acked.jobs.get(message.id!) ?? 0, message.n!));
      if (message.type === 'counter') {
        acked.counters.set(message.id!, Math.max(acked.counters.get(message.id!) ?? 0, message.n!));
        const values = acked.counterValues.get(message.id!) ?? [];
        values.push({ n: message.n!, round });
        acked.counterValues.set(message.id!, values);
      }
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (signal === 'SIGKILL') resolve();
      else reject(new Error(`writer exited with ${code}: ${stderr} (after ${writes} writes)`));
    });
  });
}

describe('fileStorage under kill -9', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-kill-'));
  // One pool of worker threads for the restarts' export runs (a thread starts once, not per round).
  const pool = new ExportPool({ maxThreads: 1 });
  afterAll(async () => {
    await pool.close();
    fs.rmSync(dir, { recursive: true, force: true });
    fs.rmSync(`${dir}-exports`, { recursive: true, force: true });
  });

  it(
    `keeps every acknowledged write exactly once over ${ROUNDS} kills`,
    async () => {
      const acked: Acked = {
        pairs: new Set(),
        resources: new Set(),
        users: new Set(),
        counters: new Map(),
        counterValues: new Map(),
        members: new Set(),
        jobs: new Map(),
        ndjson: new Set(),
        bundles: new Map(),
        patched: new Set(),
        exports: 0,
        scimUsers: new Set(),
        scimPatched: new Set(),
        inFlight: new Set(),
        httpExports: 0,
        resumed: { completed: 0, failed: 0, rounds: 0 },
        httpAnswers: 0,
      };
      const started = Date.now();
      let lastAcked = 0;
      let historyChecks = 0;
      for (let round = 0; round < ROUNDS; round++) {
        await runAndKill(dir, round, acked);
        // Reopening takes over the dead process's lock at once and repairs the tail.
        const storage = await fileStorage({ dir });
        try {
          const snapshot = await storage.exportSnapshot('p1');
          const rows = await collectNdjson(
            storage.exportReader.readResources('p1', snapshot, { resourceType: 'Observation' }),
          );
          const ids = rows.map((r) => r.id);
          expect(new Set(ids).size).toBe(ids.length);
          const present = new Set(ids);
          for (const id of acked.resources) expect(present.has(id), `resource ${id}`).toBe(true);
          for (const id of acked.ndjson) expect(present.has(id), `uploaded ${id}`).toBe(true);
          // Transactions: each acknowledged one whole; none, acknowledged or not, half there.
          const encounters = new Set(
            (await storage.searchResources('p1', 'Encounter')).resources.map((r) => r.id),
          );
          const byEncounter = new Map<string, string[]>();
          for (const row of rows) {
            const ref = (row.encounter as { reference?: string } | undefined)?.reference;
            if (ref) byEncounter.set(ref, [...(byEncounter.get(ref) ?? []), row.id]);
          }
          for (const encounter of encounters)
            expect(byEncounter.get(`Encounter/${encounter}`)).toHaveLength(10);
          expect(byEncounter.size).toBe(encounters.size);
          for (const [encounter, ids] of acked.bundles) {
            expect(encounters.has(encounter), `transaction ${encounter}`).toBe(true);
            expect(byEncounter.get(`Encounter/${encounter}`)!.sort()).toEqual([...ids].sort());
          }
          expect((await storage.searchResources('p1', 'Observation', { count: 0 })).total).toBe(ids.length);
          const users = await storage.listUsers('p1');
          const names = new Set(users.map((u) => u.userName));
          expect(names.size).toBe(users.length);
          for (const id of acked.users) expect(names.has(id), `user ${id}`).toBe(true);
          const byName = new Map(users.map((u) => [u.userName, u]));
          for (const id of acked.scimUsers) expect(names.has(id), `SCIM user ${id}`).toBe(true);
          for (const id of acked.scimPatched) expect(byName.get(id)?.active, `SCIM PATCH ${id}`).toBe(false);
          for (const id of acked.patched) {
            expect(byName.get(id)?.active, `patched ${id}`).toBe(false);
            expect(byName.get(id)?.data, `patched ${id}`).toEqual({ patched: true });
          }
          // Transactions: acknowledged ones are there, and none survived half-way.
          const patients = new Set(
            (await storage.searchResources('p1', 'Patient')).resources.map((r) => r.id),
          );
          const pairUsers = new Set([...names].filter((n) => n.startsWith('tx-')));
          expect([...patients].sort()).toEqual([...pairUsers].sort());
          for (const id of acked.pairs) expect(patients.has(id), `pair ${id}`).toBe(true);
          for (const [id, n] of acked.counters) {
            expect((await storage.readResource('p1', 'Basic', id)).n as number).toBeGreaterThanOrEqual(n);
          }
          historyChecks += await checkHistory(storage, acked, round, ids.length);
          // Memberships: each exactly once, always with its user (same batch).
          // (SCIM users have their own memberships: counted apart.)
          const scimUserIds = new Set(users.filter((u) => u.userName.startsWith('scim-')).map((u) => u.id));
          const memberships = (await storage.listMemberships('p1')).filter(
            (m) => !scimUserIds.has(m.userId!),
          );
          const memberIds = memberships.map((m) => m.id);
          expect(new Set(memberIds).size).toBe(memberIds.length);
          const byUserId = new Set(users.map((u) => u.id));
          for (const m of memberships) expect(byUserId.has(m.userId!), `member ${m.id}`).toBe(true);
          expect([...names].filter((n) => n.startsWith('m-')).sort()).toEqual([...memberIds].sort());
          for (const id of acked.members) expect(memberIds.includes(id), `member ${id}`).toBe(true);
          for (const [id, n] of acked.jobs) {
            const job = await storage.readExportJob('p1', id);
            expect(job.progress?.n as number).toBeGreaterThanOrEqual(n);
          }
          await storage.releaseSnapshot(snapshot);
          await checkInFlight(storage, `${dir}-exports`, acked, pool);
        } finally {
          await storage.close();
        }
        lastAcked = acked.resources.size + acked.users.size + acked.ndjson.size + 11 * acked.bundles.size;
      }
      // The writers really wrote something in most rounds (the HTTP loops share the writer's CPU
      // with the storage loops, which then get through fewer iterations on a busy machine).
      expect(lastAcked).toBeGreaterThan(ROUNDS * 20);
      expect(acked.pairs.size).toBeGreaterThan(ROUNDS / 2);
      expect(acked.members.size).toBeGreaterThan(ROUNDS / 2);
      expect(acked.jobs.size).toBeGreaterThan(0);
      expect(acked.ndjson.size).toBeGreaterThan(0);
      expect(acked.patched.size).toBeGreaterThan(0);
      expect(acked.exports).toBeGreaterThan(0);
      expect(acked.scimPatched.size).toBeGreaterThan(0);
      expect(acked.httpExports + acked.resumed.completed + acked.resumed.failed).toBeGreaterThan(0);
      console.info(
        `kill test over HTTP: ${acked.httpAnswers} HTTP writes and exports acknowledged; ${acked.scimUsers.size} SCIM users ` +
          `(${acked.scimPatched.size} PATCHed) found after each kill; ${acked.httpExports} HTTP exports downloaded whole; ` +
          `exports in flight at ${acked.resumed.rounds} of ${ROUNDS} kills: ${acked.resumed.completed} completed on restart, ` +
          `${acked.resumed.failed} answered a failure; ${Math.round((Date.now() - started) / 1000)} s`,
      );
      console.info(
        `kill test: ${ROUNDS} rounds; acknowledged and found after each: ${acked.resources.size} resources, ` +
          `${acked.ndjson.size} uploaded lines, ${acked.bundles.size} transactions, ${acked.users.size} users ` +
          `(${acked.patched.size} patched), ${acked.members.size} memberships, ${acked.pairs.size} pairs, ` +
          `${acked.exports} exports read whole`,
      );
      expect(acked.bundles.size).toBeGreaterThan(0);
      console.info(
        `kill test: ${historyChecks} counter versions found in their histories over ${ROUNDS} rounds`,
      );
      expect(historyChecks).toBeGreaterThan(ROUNDS);
    },
    // The soak mode's many rounds: more than the slow project's 10 minutes.
    Math.max(10 * 60_000, ROUNDS * 30_000),
  );
});
