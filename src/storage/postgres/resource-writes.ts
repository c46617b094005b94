import { isoMicros } from '../engine/clock.js';
import { InvalidRecordError } from '../errors.js';
import type {
  FhirResource,
  PatientCompartment,
  ResourceWrite,
  StoredResource,
  WriteResult,
} from '../types.js';
import {
  checkId,
  checkResourceType,
  checkResourceWrite,
  nextVersionId,
  writtenResourceKey,
} from '../record-rules.js';
import type { Query } from './executor.js';
import { identifierRows } from './schema.js';
import type { ResourceIndexer } from '../search-index.js';
import { IndexRows, insertIndexRows, keptEntries } from './index-rows.js';
import { deleteIndexRowsCtes } from './search-tables.js';

/** `checkId`, plus what PostgreSQL text cannot hold: a NUL character. */
export function checkStorableId(id: unknown, what: string): asserts id is string {
  checkId(id, what);
  if (id.includes('\u0000')) throw new InvalidRecordError(`Invalid ${what} id`);
}

/** The current version of a resource while a batch is planned (from the table or the batch). */
interface Current {
  /** Its seq when it is a row of the table (not a version written by this batch). */
  dbSeq?: string;
  /** Index in `versions` when this batch wrote it. */
  index?: number;
  versionId: string;
  deleted: boolean;
}

interface NewVersion {
  seq: string;
  resourceType: string;
  id: string;
  versionId: string;
  lu: number;
  deleted: boolean;
  body: string | null;
  superseded: string | null;
  patients: string[];
  /** The stored JSON, parsed again (what a search by scanning the bodies would see). */
  parsed?: StoredResource;
  /** The stored version (what the indexer reads). */
  stored?: StoredResource;
}

function key(resourceType: string, id: string): string {
  return `${resourceType}\u0000${id}`;
}

/** A new version as the store writes it (see {@link storedVersion}). */
export interface StoredVersion {
  /** `body` parsed: the version as a read answers it, sharing nothing with the caller's object. */
  stored: StoredResource;
  /** The JSON text of `stored`: the `body` column. */
  body: string;
  /** `stored`, when it has identifiers (their keys are of the JSON as stored). */
  parsed?: StoredResource;
}

/**
 * Version `versionId` of `resource` as the store writes it: with `id` and `meta` set
 * (`lastUpdated` the instant `lu`, microseconds), `resourceType` and `id` first in its JSON. The
 * JSON is written from a shallow copy and parsed back for the copy the caller gets, which costs
 * about half of a `structuredClone` followed by the same `JSON.stringify` (docs/performance.md,
 * "Search on PostgreSQL"), and drops what JSON cannot hold (`undefined` members) as the body does.
 */
export function storedVersion(
  resource: FhirResource,
  id: string,
  versionId: string,
  lu: number,
): StoredVersion {
  const { resourceType: type, id: _id, ...rest } = resource as StoredResource;
  const meta = { ...(rest.meta ?? {}), versionId, lastUpdated: isoMicros(lu) };
  // `resourceType` and `id` first, as FHIR servers usually write them; `meta` where it was (a
  // member named again in a literal keeps its first place), else last.
  const body = JSON.stringify({ resourceType: type, id, ...rest, meta });
  const stored = JSON.parse(body) as StoredResource;
  return stored.identifier === undefined ? { stored, body } : { stored, body, parsed: stored };
}

/**
 * Hands out `count` strictly increasing `meta.lastUpdated` instants (microseconds, starting from
 * the database clock's millisecond like the other stores) and `count` seqs for a project, and
 * locks the project's clock row until the transaction ends: resource writes of one project are
 * serialized, whichever instance makes them.
 */
export async function allocate(
  query: Query,
  s: string,
  projectId: string,
  count: number,
): Promise<{ lu: number; seqs: string[] }> {
  const { rows } = await query<{ lu: string; seqs: string[] }>(
    `INSERT INTO ${s}.resource_clocks AS c (project_id, lu)
       VALUES ($1, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint * 1000 + $2 - 1)
     ON CONFLICT (project_id) DO UPDATE SET lu = greatest(c.lu + $2, excluded.lu)
     RETURNING lu, (SELECT array_agg(nextval('${s}.resource_seq')) FROM generate_series(1, $2)) AS seqs`,
    [projectId, count],
    true,
  );
  const row = rows[0]!;
  const seqs = row.seqs.map(BigInt).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return { lu: Number(row.lu) - count + 1, seqs: seqs.map(String) };
}

/**
 * Takes the project's clock lock without taking an instant: a transaction that reads resources
 * holds back the project's resource writers until it ends, so what it read stays true (a
 * conditional create cannot race another).
 */
export async function lockProjectResources(query: Query, s: string, projectId: string): Promise<void> {
  await query(
    `INSERT INTO ${s}.resource_clocks AS c (project_id, lu) VALUES ($1, 0)
     ON CONFLICT (project_id) DO UPDATE SET lu = c.lu`,
    [projectId],
    true,
  );
}

/**
 * Applies `writes` in order inside the caller's transaction (which makes them all-or-nothing), in
 * a fixed number of statements whatever the batch size: allocate instants and seqs, read the
 * current versions `FOR UPDATE`, plan every write in memory (ids, `ifMatch`, version ids, bodies,
 * compartments), then mark the replaced versions superseded and insert the new ones. With an
 * `indexer`, the search index rows of the replaced versions are deleted and those of the new
 * current versions inserted (one more statement).
 */
export async function applyResourceWrites(
  query: Query,
  s: string,
  compartment: PatientCompartment,
  projectId: string,
  writes: readonly ResourceWrite[],
  indexer?: ResourceIndexer,
): Promise<WriteResult[]> {
  const targets = writeTargets(writes);
  if (writes.length === 0) return [];
  const { lu: firstLu, seqs } = await allocate(query, s, projectId, writes.length);
  const current = await lockCurrentVersions(query, s, projectId, targets);
  const plan = planWrites(writes, targets, current, { firstLu, seqs, compartment });
  if (plan.superseded.length > 0) await markSuperseded(query, s, plan.superseded, indexer);
  if (plan.versions.length > 0) await insertVersions(query, s, projectId, plan.versions, indexer);
  return plan.results;
}

/** The resource each write addresses, checked (type, and an id PostgreSQL can store). */
function writeTargets(writes: readonly ResourceWrite[]): { resourceType: string; id: string }[] {
  return writes.map((write) => {
    if (write.op === 'delete') {
      checkResourceType(write.resourceType);
      checkStorableId(write.id, 'resource');
      return { resourceType: write.resourceType, id: write.id };
    }
    const { resourceType, id } = writtenResourceKey(write);
    checkStorableId(id, 'resource');
    return { resourceType, id };
  });
}

/** The current versions of the targets, locked `FOR UPDATE` until the transaction ends. */
async function lockCurrentVersions(
  query: Query,
  s: string,
  projectId: string,
  targets: readonly { resourceType: string; id: string }[],
): Promise<Map<string, Current>> {
  const { rows } = await query<{
    resource_type: string;
    id: string;
    seq: string;
    version_id: string;
    deleted: boolean;
  }>(
    // One index lookup per key, whatever the planner's statistics say (LATERAL with FOR UPDATE is
    // never flattened into a join that could scan the project).
    `SELECT k.resource_type, k.id, r.seq, r.version_id, r.deleted
       FROM (SELECT DISTINCT * FROM unnest($2::text[], $3::text[])) AS k(resource_type, id)
       CROSS JOIN LATERAL (
         SELECT seq, version_id, deleted FROM ${s}.resources
          WHERE project_id = $1 AND resource_type = k.resource_type AND id = k.id AND superseded_seq IS NULL
          FOR UPDATE) r`,
    [projectId, targets.map((t) => t.resourceType), targets.map((t) => t.id)],
    true,
  );
  const current = new Map<string, Current>();
  for (const row of rows) {
    current.set(key(row.resource_type, row.id), {
      dbSeq: row.seq,
      versionId: row.version_id,
      deleted: row.deleted,
    });
  }
  return current;
}

/** What a batch writes: its new versions, the rows they supersede, and the result of each write. */
interface WritePlan {
  versions: NewVersion[];
  superseded: { old: string; next: string }[];
  results: WriteResult[];
}

/**
 * Plans every write in memory, in order (a later write of the batch sees the earlier ones through
 * `current`): `ifMatch`, version ids, bodies, compartments, and which version each supersedes.
 */
function planWrites(
  writes: readonly ResourceWrite[],
  targets: readonly { resourceType: string; id: string }[],
  current: Map<string, Current>,
  allocated: { firstLu: number; seqs: readonly string[]; compartment: PatientCompartment },
): WritePlan {
  const { firstLu, seqs, compartment } = allocated;
  const plan: WritePlan = { versions: [], superseded: [], results: [] };
  const { versions, superseded, results } = plan;
  writes.forEach((write, i) => {
    const { resourceType, id } = targets[i]!;
    const k = key(resourceType, id);
    const previous = current.get(k);
    const live = previous && !previous.deleted ? previous : undefined;
    const ifMatch = write.op === 'create' ? undefined : write.ifMatch;
    checkResourceWrite(write.op, resourceType, id, ifMatch, live?.versionId);
    if (write.op === 'delete' && !live) {
      results.push({ op: 'delete' });
      return;
    }
    const seq = seqs[versions.length]!;
    const lu = firstLu + versions.length;
    const versionId = nextVersionId(previous?.versionId);
    let body: string | null = null;
    let patients: string[] = [];
    let parsed: StoredResource | undefined;
    if (write.op === 'delete') results.push({ op: 'delete' });
    else {
      const version = storedVersion(write.resource, id, versionId, lu);
      const { stored } = version;
      body = version.body;
      parsed = version.parsed;
      patients = compartment.patientIds(stored);
      const result: WriteResult = { op: write.op, resource: stored };
      if (write.op === 'update') result.created = !live;
      results.push(result);
    }
    if (previous?.dbSeq !== undefined) superseded.push({ old: previous.dbSeq, next: seq });
    if (previous?.index !== undefined) versions[previous.index]!.superseded = seq;
    current.set(k, { index: versions.length, versionId, deleted: write.op === 'delete' });
    versions.push({
      seq,
      resourceType,
      id,
      versionId,
      lu,
      deleted: write.op === 'delete',
      body,
      superseded: null,
      patients,
      ...(parsed ? { parsed } : {}),
      ...(write.op === 'delete' ? {} : { stored: results[results.length - 1]!.resource! }),
    });
  });
  return plan;
}

/**
 * Marks the replaced rows superseded, dropping their identifier rows (and, with an indexer, their
 * search index rows). Before the inserts: the unique index on current versions must never see two.
 */
async function markSuperseded(
  query: Query,
  s: string,
  superseded: readonly { old: string; next: string }[],
  indexer: ResourceIndexer | undefined,
): Promise<void> {
  // The identifier index holds current versions only.
  const dropIndex = indexer
    ? deleteIndexRowsCtes(s, '$1')
        .map((cte) => `, ${cte}`)
        .join('')
    : '';
  await query(
    `WITH dropped AS (
       DELETE FROM ${s}.resource_identifiers WHERE seq = ANY($1::bigint[]))${dropIndex}
     UPDATE ${s}.resources r SET superseded_seq = u.next
       FROM unnest($1::bigint[], $2::bigint[]) AS u(old, next)
      WHERE r.seq = u.old`,
    [superseded.map((x) => x.old), superseded.map((x) => x.next)],
    true,
  );
}

/**
 * Inserts the new versions with their compartment and identifier rows in one statement, and, with
 * an indexer, the search index rows of those that are current (computed while the database writes).
 */
async function insertVersions(
  query: Query,
  s: string,
  projectId: string,
  versions: readonly NewVersion[],
  indexer: ResourceIndexer | undefined,
): Promise<void> {
  const members = versions.flatMap((v) => [...new Set(v.patients)].map((patient) => ({ patient, v })));
  const identifiers = identifierRows(
    versions.flatMap((v) =>
      v.parsed && v.superseded === null ? [[v.seq, v.resourceType, v.parsed] as const] : [],
    ),
  );
  const bodies = packedTexts(versions.map((v) => v.body));
  const written = query(
    `WITH version AS (
       INSERT INTO ${s}.resources
         (seq, project_id, resource_type, id, version_id, lu, deleted, body, superseded_seq)
       SELECT v.seq, $1, v.resource_type, v.id, v.version_id, v.lu, v.deleted,
              convert_from(substring($8::bytea FROM v.body_at FOR v.body_bytes), 'UTF8'), v.superseded_seq
         FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::boolean[],
                     $16::integer[], $17::integer[], $9::bigint[])
           AS v(seq, resource_type, id, version_id, lu, deleted, body_at, body_bytes, superseded_seq)),
     identifier AS (
       INSERT INTO ${s}.resource_identifiers (project_id, resource_type, key, seq)
       SELECT $1, i.resource_type, i.key, i.seq
         FROM unnest($13::text[], $14::text[], $15::bigint[]) AS i(resource_type, key, seq))
     INSERT INTO ${s}.resource_compartments (project_id, patient_id, resource_type, seq)
     SELECT $1, m.patient, m.resource_type, m.seq
       FROM unnest($10::text[], $11::text[], $12::bigint[]) AS m(patient, resource_type, seq)`,
    [
      projectId,
      versions.map((v) => v.seq),
      versions.map((v) => v.resourceType),
      versions.map((v) => v.id),
      versions.map((v) => v.versionId),
      versions.map((v) => v.lu),
      versions.map((v) => v.deleted),
      bodies.bytes,
      versions.map((v) => v.superseded),
      members.map((m) => m.patient),
      members.map((m) => m.v.resourceType),
      members.map((m) => m.v.seq),
      identifiers.types,
      identifiers.keys,
      identifiers.seqs,
      bodies.at,
      bodies.lengths,
    ],
    true,
  );
  // The indexer (JavaScript) runs while the database writes the versions.
  let rows: IndexRows | undefined;
  try {
    if (indexer) {
      rows = new IndexRows(indexer);
      for (const v of versions) {
        if (v.stored && v.superseded === null)
          rows.add(v.seq, v.resourceType, keptEntries(indexer, v.stored));
      }
    }
  } finally {
    await written;
  }
  if (rows) await insertIndexRows(query, s, projectId, rows);
}

/**
 * `texts` as one parameter: their UTF-8 bytes end to end (a `bytea`, which the driver sends as
 * binary), with each text's first byte (from 1, as SQL `substring` counts) and byte length, NULL
 * for a NULL text. A `text[]` parameter is written as an array literal, every `"` and backslash of every
 * body escaped by a regular expression in JavaScript and parsed back by PostgreSQL: for JSON
 * bodies, full of quotes, that was most of the cost of sending them (docs/performance.md, "Search
 * on PostgreSQL"). The statement takes each body back with `convert_from(substring(…), 'UTF8')`.
 */
function packedTexts(texts: readonly (string | null)[]): {
  bytes: Buffer;
  at: (number | null)[];
  lengths: (number | null)[];
} {
  const lengths = texts.map((text) => (text === null ? null : Buffer.byteLength(text)));
  const bytes = Buffer.allocUnsafe(lengths.reduce<number>((sum, n) => sum + (n ?? 0), 0));
  const at: (number | null)[] = [];
  let offset = 0;
  texts.forEach((text, i) => {
    if (text === null) {
      at.push(null);
      return;
    }
    at.push(offset + 1);
    offset += bytes.write(text, offset, lengths[i]!);
  });
  return { bytes, at, lengths };
}
