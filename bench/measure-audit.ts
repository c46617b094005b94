/**
 * `node --import tsx bench/measure-audit.ts [--events N] [--reps R]`: what the audit trail's
 * durability design costs a request, side by side in one run on the embedded file store
 * (fsync durability), to compare the two designs docs/audit.md weighs:
 *
 * - journal (the design taken): `record()` with a journal, i.e. build the AuditEvent, one `write()`
 *   to the journal segment, queue; the store write happens later in a batch;
 * - `record()` without a journal (the floor: build + queue);
 * - "await the group commit" (the alternative): a request would wait for its event's store write,
 *   here one `createResource` of an AuditEvent per request, sequential and 16 at a time;
 * - the batch drain: `flush()` of N queued events to the store (events/s), what runs off the path.
 *
 * Medians of R repetitions. Prints one table; nothing is written.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { buildAuditEvent } from '../src/audit/build-event.js';
import type { AuditRecord } from '../src/audit/events.js';
import { createAuditTrail } from '../src/audit/trail.js';
import { fileStorage } from '../src/stores.js';
import { median, now, percentile } from './stats.js';

const { values } = parseArgs({
  options: { events: { type: 'string', default: '20000' }, reps: { type: 'string', default: '5' } },
});
const EVENTS = Number(values.events);
const REPS = Number(values.reps);

const record = (i: number): AuditRecord => ({
  kind: 'fhir-access',
  interaction: 'read',
  projectId: 'p1',
  actor: { kind: 'user', id: 'u-1', profile: 'Practitioner/pr-1' },
  address: '10.0.0.7',
  resourceType: 'Observation',
  reference: `Observation/o-${i}`,
  patientIds: ['pat-1'],
});

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-bench-audit-'));
const rows: [string, string, string][] = [];
try {
  const storage = await fileStorage({ dir: path.join(root, 'store') });

  const perEvent = async (journal: boolean): Promise<number[]> => {
    const samples: number[] = [];
    for (let rep = 0; rep < REPS; rep++) {
      const dir = path.join(root, `journal-${journal}-${rep}`);
      const trail = createAuditTrail({
        storage,
        flushIntervalMs: 60_000,
        batchSize: 10_000,
        ...(journal ? { journalDir: dir } : {}),
      });
      const start = now();
      for (let i = 0; i < EVENTS; i++) trail.record(record(i));
      samples.push(((now() - start) * 1000) / EVENTS);
      const drain = now();
      await trail.flush();
      drainRates.push(EVENTS / ((now() - drain) / 1000));
      await trail.close();
    }
    return samples;
  };
  const drainRates: number[] = [];
  const build = (() => {
    const samples: number[] = [];
    for (let rep = 0; rep < REPS; rep++) {
      const start = now();
      for (let i = 0; i < EVENTS; i++) buildAuditEvent(record(i), { sourceName: 'bench', id: String(i) });
      samples.push(((now() - start) * 1000) / EVENTS);
    }
    return samples;
  })();
  const withJournal = await perEvent(true);
  const withoutJournal = await perEvent(false);

  // The alternative: each request waits for its event's own store write.
  const single: number[] = [];
  for (let i = 0; i < 300; i++) {
    const event = buildAuditEvent(record(i), { sourceName: 'bench' });
    const start = now();
    await storage.createResource('p2', event);
    single.push(now() - start);
  }
  const concurrent: number[] = [];
  for (let round = 0; round < 30; round++) {
    await Promise.all(
      Array.from({ length: 16 }, async (_, i) => {
        const event = buildAuditEvent(record(i), { sourceName: 'bench' });
        const start = now();
        await storage.createResource('p3', event);
        concurrent.push(now() - start);
      }),
    );
  }
  await storage.close();

  const us = (v: number) => `${v.toFixed(2)} µs`;
  const ms = (v: number) => `${v.toFixed(3)} ms`;
  rows.push(
    ['buildAuditEvent alone, per event (median)', us(median(build)), `${REPS} × ${EVENTS}`],
    ['record() without journal, per event (median)', us(median(withoutJournal)), `${REPS} × ${EVENTS}`],
    [
      'record() with journal (one write() each), per event (median)',
      us(median(withJournal)),
      `${REPS} × ${EVENTS}`,
    ],
    [
      'batch drain to the file store (flush of N queued events)',
      `${Math.round(median(drainRates)).toLocaleString('en-US')} events/s`,
      `${2 * REPS} drains`,
    ],
    ['awaiting its own store write, sequential: p50', ms(median(single)), '300 writes'],
    ['awaiting its own store write, sequential: p99', ms(percentile(single, 99)), '300 writes'],
    ['awaiting its own store write, 16 concurrent: p50', ms(median(concurrent)), '480 writes'],
  );
} finally {
  fs.rmSync(root, { recursive: true, force: true });
}

const width = Math.max(...rows.map((r) => r[0].length));
console.log(`${'Measurement'.padEnd(width)} | Value           | Over`);
for (const [name, value, over] of rows) console.log(`${name.padEnd(width)} | ${value.padEnd(15)} | ${over}`);
