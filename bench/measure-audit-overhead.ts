import { bearer, expectJson } from './http-json.js';
import { createScimUser, timed } from './measure-scim.js';
import type { ServerProcess } from './server-process.js';
import { median, sleep } from './stats.js';

/** Latencies (ms) of one server: SCIM `POST /Users` and FHIR `GET Patient/{id}`. */
export interface AuditSideSamples {
  scimCreateMs: number[];
  fhirReadMs: number[];
}

/** Both servers' samples, taken in alternating rounds. */
export interface AuditOverheadSamples {
  on: AuditSideSamples;
  off: AuditSideSamples;
  rounds: number;
}

/**
 * The median over rounds of each round's p50 on / p50 off: each round times both servers back to
 * back, so a change of the machine's load between rounds (other work on a shared machine) cancels
 * out, which the p50 of all samples does not do.
 */
export function medianRoundRatio(on: number[], off: number[], rounds: number): number {
  const per = Math.ceil(on.length / rounds);
  const ratios: number[] = [];
  for (let i = 0; i < on.length; i += per)
    ratios.push(median(on.slice(i, i + per)) / median(off.slice(i, i + per)));
  return median(ratios);
}

const PATIENTS = 20;
const WARM_UP = 10;
/**
 * Idle time after each block beyond the audited server's flush interval: its last batch write lands
 * then, not while the other server is being timed.
 */
const SETTLE_MARGIN_MS = 100;

interface Side {
  server: ServerProcess;
  token: string;
  patientIds: string[];
  samples: AuditSideSamples;
  created: number;
}

async function prepare(server: ServerProcess): Promise<Side> {
  const project = await server.call('newProject', { name: 'audit-overhead', strict: false });
  const fhirBase = `${server.info.origin}/fhir/R4`;
  const patientIds: string[] = [];
  for (let i = 0; i < PATIENTS; i++) {
    const created = await expectJson(201, `${fhirBase}/Patient`, {
      method: 'POST',
      headers: bearer(project.token, { 'content-type': 'application/fhir+json' }),
      body: JSON.stringify({ resourceType: 'Patient', name: [{ family: `Audit${i}` }], gender: 'female' }),
    });
    patientIds.push((created.body as { id: string }).id);
  }
  return {
    server,
    token: project.token,
    patientIds,
    samples: { scimCreateMs: [], fhirReadMs: [] },
    created: 0,
  };
}

function scimCreate(side: Side): Promise<void> {
  return createScimUser(`${side.server.info.origin}/scim/v2`, side.token, side.created++);
}

function fhirRead(side: Side, i: number): Promise<unknown> {
  const id = side.patientIds[i % side.patientIds.length]!;
  return expectJson(200, `${side.server.info.origin}/fhir/R4/Patient/${id}`, {
    headers: bearer(side.token, { accept: 'application/fhir+json' }),
  });
}

/**
 * SCIM `POST /Users` and FHIR `GET Patient/{id}` latencies on two servers that differ only in
 * auditing (`on`: the platform's default, enabled; `off`: `audit: { enabled: false }`), side by
 * side: `requests` of each kind per server, in `rounds` (20) alternating blocks (the server that goes
 * first alternates too), one request at a time, so both face the same machine load; each block
 * ends with a short pause so that one server's background work is not timed on the other. A few
 * warm-up requests of each kind per server are not counted.
 */
export async function measureAuditOverhead(options: {
  on: ServerProcess;
  off: ServerProcess;
  requests: number;
  rounds?: number;
  /** The audited server's `flushIntervalMs`. @default 100 */
  flushIntervalMs?: number;
}): Promise<AuditOverheadSamples> {
  const settleMs = (options.flushIntervalMs ?? 100) + SETTLE_MARGIN_MS;
  const on = await prepare(options.on);
  const off = await prepare(options.off);
  for (const side of [on, off]) {
    for (let i = 0; i < WARM_UP; i++) {
      await scimCreate(side);
      await fhirRead(side, i);
    }
  }
  const rounds = Math.max(1, Math.min(options.rounds ?? 40, options.requests));
  const perRound = Math.ceil(options.requests / rounds);
  let read = 0;
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? [on, off] : [off, on];
    for (const side of order) {
      for (let i = 0; i < perRound; i++) side.samples.scimCreateMs.push(await timed(() => scimCreate(side)));
      for (let i = 0; i < perRound; i++)
        side.samples.fhirReadMs.push(await timed(() => fhirRead(side, read + i)));
      await sleep(settleMs);
    }
    read += perRound;
  }
  return { on: on.samples, off: off.samples, rounds };
}
