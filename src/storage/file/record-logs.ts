import { assertNever } from '../assert-never.js';
import type { Mutation } from '../engine/mutation.js';
import type { BaseState } from '../engine/state.js';
import type { ExportJobRecord, MembershipRecord, UserRecord } from '../types.js';
import type { RecordOp } from './record.js';

/**
 * The per-project logs of directory records: `<name>.log` in the project's directory. The names
 * are file names on disk: never rename one.
 */
export type RecordLogName = 'users' | 'memberships' | 'jobs';
export const RECORD_LOG_NAMES: readonly RecordLogName[] = ['users', 'memberships', 'jobs'];

/** What one mutation appends to a record log: a whole record (`U`) or a deletion (`D`, `{ id }`). */
export interface RecordLogWrite {
  projectId: string;
  log: RecordLogName;
  op: RecordOp;
  json: string;
}

/** The record log write of a mutation kept in a record log; undefined for other kinds. */
export function recordLogWrite(m: Mutation): RecordLogWrite | undefined {
  switch (m.kind) {
    case 'user-put':
      return { projectId: m.projectId, log: 'users', op: 'U', json: JSON.stringify(m.record) };
    case 'user-delete':
      return { projectId: m.projectId, log: 'users', op: 'D', json: JSON.stringify({ id: m.id }) };
    case 'membership-put':
      return { projectId: m.projectId, log: 'memberships', op: 'U', json: JSON.stringify(m.record) };
    case 'membership-delete':
      return { projectId: m.projectId, log: 'memberships', op: 'D', json: JSON.stringify({ id: m.id }) };
    case 'export-job-put':
      return { projectId: m.record.projectId, log: 'jobs', op: 'U', json: JSON.stringify(m.record) };
    case 'export-job-delete':
      return { projectId: m.projectId, log: 'jobs', op: 'D', json: JSON.stringify({ id: m.id }) };
    case 'project-put':
    case 'project-delete':
    case 'client-put':
    case 'signing-key-put':
    case 'one-time-value-put':
    case 'resource-put':
    case 'resource-delete':
      return undefined;
    default:
      return assertNever(m);
  }
}

/** The mutation a record log's record replays. */
export function recordLogMutation(
  log: RecordLogName,
  projectId: string,
  value: { id: string },
  deleted: boolean,
): Mutation {
  switch (log) {
    case 'users':
      return deleted
        ? { kind: 'user-delete', projectId, id: value.id }
        : { kind: 'user-put', projectId, record: value as UserRecord };
    case 'memberships':
      return deleted
        ? { kind: 'membership-delete', projectId, id: value.id }
        : { kind: 'membership-put', projectId, record: value as MembershipRecord };
    case 'jobs':
      return deleted
        ? { kind: 'export-job-delete', projectId, id: value.id }
        : { kind: 'export-job-put', record: value as ExportJobRecord };
    default:
      return assertNever(log);
  }
}

/** The current records a record log must hold (what a rewrite keeps). */
export function* liveRecords(
  base: BaseState,
  log: RecordLogName,
  projectId: string,
): Iterable<{ id: string }> {
  switch (log) {
    case 'users':
      yield* base.users(projectId);
      break;
    case 'memberships':
      yield* base.memberships(projectId);
      break;
    case 'jobs':
      for (const job of base.jobs()) if (job.projectId === projectId) yield job;
      break;
    default:
      assertNever(log);
  }
}

/**
 * The JSON of a `once.log` record. The short field names are the format on disk (`k`: the key,
 * `e`: its expiry in epoch ms): kept as they are so existing stores open.
 */
interface OneTimeValueJson {
  k: string;
  e: number;
}

export function encodeOneTimeValue(key: string, expiresAt: number): string {
  return JSON.stringify({ k: key, e: expiresAt } satisfies OneTimeValueJson);
}

export function decodeOneTimeValue(json: string): { key: string; expiresAt: number } {
  const { k, e } = JSON.parse(json) as OneTimeValueJson;
  return { key: k, expiresAt: e };
}
