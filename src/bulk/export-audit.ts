import type { ExportEvent } from '../audit/events.js';
import type { ExportParams } from './kickoff-params.js';
import type { ExportTaskResult } from './export-task.js';

/**
 * What every event of an export says of it: its level, the `_type`, `_since`, `_until`,
 * `organizeOutputBy` and `allowPartialManifests` asked, the Group.
 */
export type ExportScope = Pick<
  ExportEvent,
  'level' | 'types' | 'since' | 'until' | 'organizeOutputBy' | 'allowPartialManifests' | 'groupId'
>;

/** The scope of an export from its kick-off parameters (as persisted with the job). */
export function exportScope(params: Partial<ExportParams> | undefined): ExportScope {
  return {
    level: params?.level ?? 'system',
    ...(params?.types?.length ? { types: params.types } : {}),
    ...(params?.since !== undefined ? { since: params.since } : {}),
    ...(params?.until !== undefined ? { until: params.until } : {}),
    ...(params?.organizeOutputBy !== undefined ? { organizeOutputBy: params.organizeOutputBy } : {}),
    ...(params?.allowPartialManifests ? { allowPartialManifests: true as const } : {}),
    ...(params?.groupId !== undefined ? { groupId: params.groupId } : {}),
  };
}

/** Resources exported per type, from a finished job's result (its `output` files). */
export function exportCounts(result: Partial<ExportTaskResult> | undefined): Record<string, number> {
  if (result?.counts) return { ...result.counts };
  const counts: Record<string, number> = {};
  for (const { type, count } of result?.output ?? [])
    if (type !== undefined) counts[type] = (counts[type] ?? 0) + count;
  return counts;
}

/** The text of an OperationOutcome's first issue (a failed job's `failure`). */
export function outcomeText(outcome: Record<string, unknown> | undefined): string | undefined {
  const issue = (
    outcome?.issue as { details?: { text?: unknown }; diagnostics?: unknown }[] | undefined
  )?.[0];
  const text = issue?.details?.text ?? issue?.diagnostics;
  return typeof text === 'string' ? text : undefined;
}
