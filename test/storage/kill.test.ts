import { fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { fileStorage } from '../../src/stores.js';
import { collectNdjson } from '../../src/testing/storage-contract.js';

const fixture = fileURLToPath(new URL('./fixtures/kill-writer.ts', import.meta.url));
const ROUNDS = Number(process.env.KILL_TEST_ROUNDS ?? 20);

interface Acked {
  pairs: Set<string>;
  resources: Set<string>;
  users: Set<string>;
  counters: Map<string, number>;
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
}

/** Runs the writer until it has acknowledged writes for a random while, then SIGKILLs it. */
function runAndKill(dir: string, round: number, acked: Acked): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = fork(fixture, [dir, String(round)], {
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
        // At the latest: a writer that acknowledges nothing still dies (and the counts below fail).
        timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
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
      if (message.type === 'job')
        acked.jobs.set(message.id!, Math.max(acked.jobs.get(message.id!) ?? 0, message.n!));
      if (message.type === 'counter')
        acked.counters.set(message.id!, Math.max(acked.counters.get(message.id!) ?? 0, message.n!));
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
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it(`keeps every acknowledged write exactly once over ${ROUNDS} kills`, async () => {
    const acked: Acked = {
      pairs: new Set(),
      resources: new Set(),
      users: new Set(),
      counters: new Map(),
      members: new Set(),
      jobs: new Map(),
      ndjson: new Set(),
      bundles: new Map(),
      patched: new Set(),
      exports: 0,
    };
    let lastAcked = 0;
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
        for (const id of acked.patched) {
          expect(byName.get(id)?.active, `patched ${id}`).toBe(false);
          expect(byName.get(id)?.data, `patched ${id}`).toEqual({ patched: true });
        }
        // Transactions: acknowledged ones are there, and none survived half-way.
        const patients = new Set((await storage.searchResources('p1', 'Patient')).resources.map((r) => r.id));
        const pairUsers = new Set([...names].filter((n) => n.startsWith('tx-')));
        expect([...patients].sort()).toEqual([...pairUsers].sort());
        for (const id of acked.pairs) expect(patients.has(id), `pair ${id}`).toBe(true);
        for (const [id, n] of acked.counters) {
          expect((await storage.readResource('p1', 'Basic', id)).n as number).toBeGreaterThanOrEqual(n);
        }
        // Memberships: each exactly once, always with its user (same batch).
        const memberships = await storage.listMemberships('p1');
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
    console.info(
      `kill test: ${ROUNDS} rounds; acknowledged and found after each: ${acked.resources.size} resources, ` +
        `${acked.ndjson.size} uploaded lines, ${acked.bundles.size} transactions, ${acked.users.size} users ` +
        `(${acked.patched.size} patched), ${acked.members.size} memberships, ${acked.pairs.size} pairs, ` +
        `${acked.exports} exports read whole`,
    );
    expect(acked.bundles.size).toBeGreaterThan(0);
  }, Math.max(120_000, ROUNDS * 8_000));
});
