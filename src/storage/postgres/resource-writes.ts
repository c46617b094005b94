import { randomUUID } from 'node:crypto';
import { patientCompartmentIds } from '../../fhir/compartment.js';
import { isoMicros } from '../engine/clock.js';
import { ConflictError, InvalidRecordError, PreconditionFailedError } from '../errors.js';
import type { ResourceWrite, StoredResource, WriteResult } from '../types.js';
import type { Query } from './executor.js';

const RESOURCE_TYPE = /^[A-Z][A-Za-z0-9]{0,63}$/;

export function checkResourceType(resourceType: unknown): asserts resourceType is string {
  if (typeof resourceType !== 'string' || !RESOURCE_TYPE.test(resourceType)) {
    throw new InvalidRecordError(`Invalid resource type ${JSON.stringify(resourceType)}`);
  }
}

export function checkId(id: unknown, what: string): asserts id is string {
  if (typeof id !== 'string' || id.length === 0) throw new InvalidRecordError(`Invalid ${what} id`);
}

interface CurrentRow {
  seq: string;
  version_id: string;
  deleted: boolean;
  next: string;
}

function nextVersion(previous: CurrentRow | undefined): string {
  const n = previous ? Number.parseInt(previous.version_id, 10) : 0;
  return String(Number.isFinite(n) ? n + 1 : 1);
}

/**
 * Hands out `count` strictly increasing `meta.lastUpdated` instants (microseconds) for a project
 * from the database clock, and locks the project's clock row until the transaction ends: resource
 * writes of one project are serialized, whichever instance makes them.
 */
async function tick(query: Query, s: string, projectId: string, count: number): Promise<number> {
  const { rows } = await query<{ lu: string }>(
    `INSERT INTO ${s}.resource_clocks AS c (project_id, lu)
       VALUES ($1, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint * 1000 + $2 - 1)
     ON CONFLICT (project_id) DO UPDATE SET lu = greatest(c.lu + $2, excluded.lu)
     RETURNING lu`,
    [projectId, count],
    true,
  );
  return Number(rows[0]!.lu) - count + 1;
}

/**
 * Applies `writes` in order inside the caller's transaction (all-or-nothing is the caller's
 * transaction). Each write reads the current version `FOR UPDATE`, checks `ifMatch`, marks the
 * current version superseded and inserts the new version (or tombstone) with its compartment rows.
 */
export async function applyResourceWrites(
  query: Query,
  s: string,
  projectId: string,
  writes: readonly ResourceWrite[],
): Promise<WriteResult[]> {
  for (const write of writes) {
    if (write.op === 'delete') checkResourceType(write.resourceType);
    else {
      if (typeof write.resource !== 'object' || write.resource === null) {
        throw new InvalidRecordError('A resource must be an object');
      }
      checkResourceType(write.resource.resourceType);
    }
  }
  if (writes.length === 0) return [];
  let lu = await tick(query, s, projectId, writes.length);
  const results: WriteResult[] = [];
  for (const write of writes) {
    const resourceType = write.op === 'delete' ? write.resourceType : write.resource.resourceType;
    const id: unknown =
      write.op === 'delete'
        ? write.id
        : write.op === 'create'
          ? (write.resource.id ?? randomUUID())
          : write.resource.id;
    checkId(id, 'resource');
    const { rows } = await query<CurrentRow>(
      `SELECT c.seq, c.version_id, c.deleted, nextval('${s}.resource_seq') AS next
         FROM (SELECT 1) one
         LEFT JOIN (SELECT seq, version_id, deleted FROM ${s}.resources
                     WHERE project_id = $1 AND resource_type = $2 AND id = $3 AND superseded_seq IS NULL
                     FOR UPDATE) c ON true`,
      [projectId, resourceType, id],
      true,
    );
    const row = rows[0]!;
    const current = row.seq === null ? undefined : row;
    const live = current && !current.deleted ? current : undefined;
    const ifMatch = write.op === 'create' ? undefined : write.ifMatch;
    if (ifMatch !== undefined && live?.version_id !== ifMatch) {
      throw new PreconditionFailedError(`${resourceType}/${id} is not at version ${ifMatch}`);
    }
    if (write.op === 'create' && live) {
      throw new ConflictError(`${resourceType}/${id} exists`, { attribute: 'id' });
    }
    if (write.op === 'delete' && !live) {
      results.push({ op: 'delete' });
      continue;
    }
    const versionId = nextVersion(current);
    const lastUpdated = isoMicros(lu);
    let body: string | null = null;
    let patients: string[] = [];
    let stored: StoredResource | undefined;
    if (write.op !== 'delete') {
      const copy = structuredClone(write.resource) as StoredResource;
      copy.id = id;
      copy.meta = { ...(copy.meta ?? {}), versionId, lastUpdated };
      // Keep `resourceType` and `id` first in the stored JSON, as FHIR servers usually do.
      const { resourceType: type, id: _id, ...rest } = copy;
      stored = { resourceType: type, id, ...rest };
      body = JSON.stringify(stored);
      patients = patientCompartmentIds(stored);
    }
    if (current) {
      await query(
        `UPDATE ${s}.resources SET superseded_seq = $1 WHERE seq = $2`,
        [row.next, current.seq],
        true,
      );
    }
    await query(
      `WITH version AS (
         INSERT INTO ${s}.resources (seq, project_id, resource_type, id, version_id, lu, deleted, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8))
       INSERT INTO ${s}.resource_compartments (project_id, patient_id, resource_type, seq)
       SELECT DISTINCT $2, patient, $3, $1::bigint FROM unnest($9::text[]) AS patient`,
      [row.next, projectId, resourceType, id, versionId, lu, write.op === 'delete', body, patients],
      true,
    );
    lu += 1;
    if (write.op === 'delete') results.push({ op: 'delete' });
    else {
      const result: WriteResult = { op: write.op, resource: stored! };
      if (write.op === 'update') result.created = !live;
      results.push(result);
    }
  }
  return results;
}
