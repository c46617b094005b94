import { randomUUID } from 'node:crypto';
import { PlatformError } from '../errors.js';
import type {
  ExportFileSink,
  ExportReadOptions,
  ExportReader,
  FhirResource,
  NdjsonChunk,
  StoredResource,
} from '../storage/types.js';
import { ByteBudget, ExportTooLargeError } from './byte-budget.js';
import { elementsFor, projectElements, type ElementSelection } from '../search/elements.js';
import type { CommittedFile, ExportProgress, ExportTask, ExportTaskResult } from './export-task.js';
import { loadMandatoryElements } from '../search/element-tables.js';
import { NdjsonFileWriter } from './ndjson-file-writer.js';
import { chunkText, ndjsonLines } from './ndjson-lines.js';
import { AssociatedProvenance } from './provenance.js';
import { BlockFileWriter } from './block-file-writer.js';
import { directorySink } from './directory-export-files.js';
import { writePatientBlocks, type CopyInto } from './organized-export.js';
import { loadSearchRegistry } from '../search/definitions.js';
import { parseTypeFilter, typeFilterTests, type TypeFilterSearch } from './type-filter.js';

/** Options of {@link runExport} besides the task. */
export interface RunExportOptions {
  /** Called at most every `progressInterval` ms and after each type. */
  onProgress?: (progress: ExportProgress) => void;
  /** Stops the export between chunks (main-thread runs; workers are terminated instead). */
  signal?: AbortSignal;
  /** @default 250 */
  progressInterval?: number;
  /** Where the files go. @default the directory `task.outputDir` */
  sink?: ExportFileSink;
}

/** Transformed lines are written in batches of about this many characters. */
const BATCH_CHARS = 256 * 1024;

function deletionBundle(resourceType: string, id: string): string {
  return `${JSON.stringify({
    resourceType: 'Bundle',
    id: randomUUID(),
    type: 'transaction',
    entry: [{ request: { method: 'DELETE', url: `${resourceType}/${id}` } }],
  })}\n`;
}

function issueOutcome(issue: ExportTask['issues'][number]): string {
  return `${JSON.stringify({
    resourceType: 'OperationOutcome',
    id: randomUUID(),
    issue: [
      {
        severity: issue.severity,
        code: issue.code,
        details: { text: issue.text },
        expression: issue.expression,
      },
    ],
  })}\n`;
}

/** What a type's lines go through: `_elements` and `_typeFilter` (absent: lines are copied as read). */
interface LineTransform {
  kept?: ElementSelection;
  typeFilter?: (resource: FhirResource) => boolean;
}

/** One export as it runs: its task and reader, the files it writes, its progress. */
interface ExportRun {
  reader: ExportReader;
  task: ExportTask;
  budget: ByteBudget;
  progress: ExportProgress;
  result: ExportTaskResult;
  /** Every file writer opened, aborted together when the export fails. */
  writers: { abort(): Promise<void> }[];
  /** Where the files go. */
  sink: string | ExportFileSink;
  /** `_typeFilter` tests by type. */
  filters: Map<string, (resource: FhirResource) => boolean>;
  /** The elements kept of a type under `_elements`. */
  selectionOf: (resourceType: string) => ElementSelection | undefined;
  /** Reports progress: now when `force`, else at most every `progressInterval` ms. */
  report: (force: boolean) => void;
  /** Throws once the signal has stopped the export. */
  checkAborted: () => void;
  /**
   * Opens the next file series (`Patient`, `deleted`, `error`, …); with `allowPartialManifests`,
   * the files of a `listed` series are reported as they are committed.
   */
  newWriter: (prefix: string, listed?: Omit<CommittedFile, 'file' | 'count'>) => NdjsonFileWriter;
}

/** The patients whose compartments are exported: who is new since `_since`, and everyone else. */
interface Compartments {
  level: boolean;
  /** Members added after `_since`: their whole compartments are exported. */
  newIds: string[];
  /** The other patients (all of them at system level: undefined). */
  oldIds: string[] | undefined;
}

/**
 * Runs one export with `reader`, writing NDJSON files to `options.sink` (or `task.outputDir`). The same code runs in
 * a worker thread (`export-worker.ts`) and, for stores without a descriptor, in the main thread.
 *
 * Lines are copied as read unless `_elements` or `_typeFilter` apply to the type, in which case each
 * line is parsed. With `includeAssociatedData`, the ids of copied lines are recorded (read from the
 * line's start, without parsing) and the associated Provenance are added last (see
 * {@link AssociatedProvenance}). Bulk Data 2.0.0 "Bulk Data Output File Organization": one type per
 * file.
 */
export async function runExport(
  reader: ExportReader,
  task: ExportTask,
  options: RunExportOptions = {},
): Promise<ExportTaskResult> {
  const run = await startRun(reader, task, options);
  const { params, snapshot, projectId } = task;
  try {
    await writeIssues(run);
    // Without any Provenance in the snapshot there is nothing to associate: no id is recorded.
    const associated =
      params.associatedData && (await hasAny(reader, projectId, snapshot, 'Provenance'))
        ? new AssociatedProvenance(params.associatedData)
        : undefined;
    // Provenance exported for `_type` goes last, so that associated ones join its file.
    const types =
      associated && task.types.includes('Provenance')
        ? [...task.types.filter((t) => t !== 'Provenance'), 'Provenance']
        : task.types;
    const compartments = await compartmentsOf(run);
    const deletedWriter =
      params.sinceMs !== undefined
        ? run.newWriter('deleted', { kind: 'deleted', type: 'Bundle' })
        : undefined;
    if (params.organizeOutputBy) {
      await runOrganized(run, compartments, deletedWriter);
      run.result.bytes = run.budget.used;
      return run.result;
    }
    let provenanceWriter: NdjsonFileWriter | undefined;
    // Types the snapshot has no version of are not read (a store answers which, when it can).
    const withVersions = await reader.typesWithVersions?.(projectId, snapshot, types);
    for (const resourceType of types) {
      run.checkAborted();
      if (withVersions && !withVersions.has(resourceType)) {
        run.progress.typesDone += 1;
        continue;
      }
      const writer = await exportType(run, resourceType, compartments, associated, deletedWriter);
      if (associated && resourceType === 'Provenance') provenanceWriter = writer;
      else await finishFiles(writer, resourceType, run.result.output);
      run.progress.typesDone += 1;
      run.report(true);
    }
    if (associated) await writeAssociated(run, associated, provenanceWriter);
    if (deletedWriter) await finishFiles(deletedWriter, 'Bundle', run.result.deleted);
    run.result.bytes = run.budget.used;
    return run.result;
  } catch (error) {
    // A failed abort (the disk or the database still failing) must not replace the error that
    // stopped the export: the job's files are removed again when it is marked failed.
    await Promise.all(run.writers.map((w) => w.abort().catch(() => undefined)));
    if (error instanceof ExportTooLargeError) {
      return { output: [], deleted: [], error: [], bytes: run.budget.used, tooLarge: true };
    }
    throw error;
  }
}

/** Sets up a run: its filters and element selections, its progress reports, where its files go. */
async function startRun(
  reader: ExportReader,
  task: ExportTask,
  options: RunExportOptions,
): Promise<ExportRun> {
  const { params } = task;
  const { signal, onProgress } = options;
  const interval = options.progressInterval ?? 250;
  const budget = new ByteBudget(task.maxExportSize);
  const progress: ExportProgress = { resources: 0, typesDone: 0, typesTotal: task.types.length, bytes: 0 };
  let lastReport = 0;
  const report = (force: boolean): void => {
    const now = Date.now();
    if (onProgress && (force || now - lastReport >= interval)) {
      lastReport = now;
      progress.bytes = budget.used;
      onProgress({ ...progress, ...(progress.committed ? { committed: [...progress.committed] } : {}) });
    }
  };
  const checkAborted = (): void => {
    if (signal?.aborted)
      throw signal.reason instanceof Error
        ? signal.reason
        : new PlatformError('ERR_EXPORT_STOPPED', 'Export cancelled');
  };
  const filters = await typeFilterTestsOf(params);
  const mandatory = params.elements ? await loadMandatoryElements() : undefined;
  const selectionOf = (resourceType: string): ElementSelection | undefined =>
    params.elements ? elementsFor(resourceType, params.elements, mandatory?.get(resourceType)) : undefined;
  const sink = options.sink ?? task.outputDir;
  if (sink === undefined)
    throw new PlatformError(
      'ERR_EXPORT_TASK_INVALID',
      'The export task has neither outputDir nor a file sink',
    );
  const writers: ExportRun['writers'] = [];
  if (params.allowPartialManifests) progress.committed = [];
  const newWriter: ExportRun['newWriter'] = (prefix, listed) => {
    const writer = new NdjsonFileWriter(sink, prefix, task.maxFileSize, budget);
    const committed = progress.committed;
    if (committed && listed) {
      writer.onCommit = ({ file, count }) => {
        committed.push({ ...listed, file, count });
        report(true);
      };
    }
    writers.push(writer);
    return writer;
  };
  const result: ExportTaskResult = { output: [], deleted: [], error: [], bytes: 0 };
  return {
    reader,
    task,
    budget,
    progress,
    result,
    writers,
    sink,
    filters,
    selectionOf,
    report,
    checkAborted,
    newWriter,
  };
}

/** Closes `writer` and lists its files under `type`. */
async function finishFiles(
  writer: NdjsonFileWriter,
  type: string,
  list: ExportTaskResult['output'],
): Promise<void> {
  for (const f of await writer.finish()) list.push({ type, file: f.file, count: f.count });
}

/** The kick-off's ignored problems (lenient handling), one OperationOutcome each in the error file. */
async function writeIssues(run: ExportRun): Promise<void> {
  if (run.task.issues.length === 0) return;
  const writer = run.newWriter('error');
  for (const issue of run.task.issues) await writer.write(issueOutcome(issue), 1);
  await finishFiles(writer, 'OperationOutcome', run.result.error);
}

/**
 * Who the compartment levels export: every patient of the snapshot at Patient level without
 * `patient`, and at system level when organized by patient.
 */
async function compartmentsOf(run: ExportRun): Promise<Compartments> {
  const { reader, task } = run;
  const { params, snapshot, projectId } = task;
  let patientIds = task.patientIds;
  if ((params.level === 'patient' || params.organizeOutputBy) && !patientIds) {
    // Every patient of the snapshot: the Patient level exports all their compartments.
    const ids: string[] = [];
    for await (const chunk of reader.readResources(projectId, snapshot, {
      resourceType: 'Patient',
      reuseChunks: true,
    })) {
      run.checkAborted();
      for (const line of ndjsonLines(chunkText(chunk.data)))
        ids.push((JSON.parse(line) as { id: string }).id);
    }
    patientIds = ids;
  }
  const newIds = params.sinceMs !== undefined ? (task.newPatientIds ?? []) : [];
  const oldIds = newIds.length > 0 ? (patientIds ?? []).filter((id) => !newIds.includes(id)) : patientIds;
  return { level: params.level !== 'system', newIds, oldIds };
}

/**
 * Writes the resources of one type (and, with `_since`, its deletions) to a new writer, returned
 * open: the caller finishes it (Provenance stays open for the associated ones).
 */
async function exportType(
  run: ExportRun,
  resourceType: string,
  compartments: Compartments,
  associated: AssociatedProvenance | undefined,
  deletedWriter: NdjsonFileWriter | undefined,
): Promise<NdjsonFileWriter> {
  const { reader, task } = run;
  const { params, snapshot, projectId } = task;
  const { level, newIds, oldIds } = compartments;
  const writer = run.newWriter(resourceType, { kind: 'output', type: resourceType });
  const kept = run.selectionOf(resourceType);
  const typeFilter = run.filters.get(resourceType);
  const target: CopyTarget = {
    writer,
    resourceType,
    transform: kept || typeFilter ? { kept, typeFilter } : undefined,
    associated,
  };
  if (!level || (oldIds && oldIds.length > 0)) {
    // Every chunk is written (or decoded) before the next is asked for: its memory can be reused.
    const base: ExportReadOptions = { resourceType, reuseChunks: true, ...untilOf(params) };
    if (params.sinceMs !== undefined) base.since = params.sinceMs;
    if (level) base.patientIds = oldIds;
    const skip = newIds.length > 0 ? new Set<string>() : undefined;
    if (newIds.length > 0) {
      // Members added after _since: their whole compartments, whatever their lastUpdated.
      const added = reader.readResources(projectId, snapshot, {
        resourceType,
        patientIds: newIds,
        reuseChunks: true,
        ...untilOf(params),
      });
      await copyChunks(run, target, added, skip, true);
    }
    await copyChunks(run, target, reader.readResources(projectId, snapshot, base), skip, false);
    if (deletedWriter && params.sinceMs !== undefined) {
      for await (const tombstone of reader.readDeleted(projectId, snapshot, base)) {
        run.checkAborted();
        await deletedWriter.write(deletionBundle(tombstone.resourceType, tombstone.id), 1);
      }
    }
  } else if (newIds.length > 0) {
    const added = reader.readResources(projectId, snapshot, {
      resourceType,
      patientIds: newIds,
      reuseChunks: true,
      ...untilOf(params),
    });
    await copyChunks(run, target, added, undefined, false);
  }
  return writer;
}

/** The `until` bound of every read (`_until`), when the export has one before its kick-off. */
function untilOf(params: ExportTask['params']): Pick<ExportReadOptions, 'until'> {
  return params.untilMs === undefined ? {} : { until: params.untilMs };
}

/** What lines are written to: a file writer, or a block of one. */
interface LineSink {
  write(data: string | Uint8Array, count: number): Promise<void>;
}

/**
 * An export organized by patient (`organizeOutputBy=Patient`, see ./organized-export.ts): the
 * blocks of every patient, then, with `_since`, the deletions of the compartment types.
 */
async function runOrganized(
  run: ExportRun,
  compartments: Compartments,
  deletedWriter: NdjsonFileWriter | undefined,
): Promise<void> {
  const { reader, task } = run;
  const { params, projectId, snapshot } = task;
  const withVersions = await reader.typesWithVersions?.(projectId, snapshot, task.types);
  const present = task.types.filter((t) => !withVersions || withVersions.has(t));
  const types = present.includes('Patient')
    ? ['Patient', ...present.filter((t) => t !== 'Patient')]
    : present;
  const committed = run.progress.committed;
  const writer = new BlockFileWriter(
    typeof run.sink === 'string' ? directorySink(run.sink) : run.sink,
    'Patients',
    task.maxFileSize,
    run.budget,
    committed &&
      ((file) => {
        committed.push({ ...file, kind: 'output' });
        run.report(true);
      }),
  );
  run.writers.push(writer);
  const counts: Record<string, number> = {};
  const copy: CopyInto = (resourceType, chunks) => {
    const counting: LineSink = {
      write: (data, count) => {
        counts[resourceType] = (counts[resourceType] ?? 0) + count;
        return writer.write(data, count);
      },
    };
    const kept = run.selectionOf(resourceType);
    const typeFilter = run.filters.get(resourceType);
    const transform = kept || typeFilter ? { kept, typeFilter } : undefined;
    return copyChunks(
      run,
      { writer: counting, resourceType, transform, associated: undefined },
      chunks,
      undefined,
      false,
    );
  };
  const patientIds = [...compartments.newIds, ...(compartments.oldIds ?? [])];
  const organized = { reader, task, writer, copy, checkAborted: run.checkAborted, report: run.report };
  await writePatientBlocks(organized, patientIds, new Set(compartments.newIds), types);
  run.result.output.push(...(await writer.finish()));
  run.result.counts = counts;
  if (deletedWriter && params.sinceMs !== undefined) {
    for (const resourceType of types) {
      const base: ExportReadOptions = { resourceType, since: params.sinceMs, patientIds, ...untilOf(params) };
      for await (const tombstone of reader.readDeleted(projectId, snapshot, base)) {
        run.checkAborted();
        await deletedWriter.write(deletionBundle(tombstone.resourceType, tombstone.id), 1);
      }
    }
    await finishFiles(deletedWriter, 'Bundle', run.result.deleted);
  }
  run.progress.typesDone = run.progress.typesTotal;
  run.report(true);
}

/** Where {@link copyChunks} writes, and what it does to each line on the way. */
interface CopyTarget {
  writer: LineSink;
  resourceType: string;
  transform: LineTransform | undefined;
  associated: AssociatedProvenance | undefined;
}

/**
 * Writes chunks of stored lines to the target's writer: as read on the hot path, else line by line
 * (through `_elements` and `_typeFilter`, and skipping the ids in `seen`, or recording them when
 * `remember`).
 */
async function copyChunks(
  run: ExportRun,
  { writer, resourceType, transform: how, associated }: CopyTarget,
  chunks: AsyncIterable<NdjsonChunk> | Iterable<NdjsonChunk>,
  seen: Set<string> | undefined,
  remember: boolean,
): Promise<void> {
  for await (const chunk of chunks) {
    run.checkAborted();
    if (!how && !seen) {
      // The hot path: whole lines copied without parsing.
      associated?.noteChunk(resourceType, chunk.data);
      await writer.write(chunk.data, chunk.count);
      run.progress.resources += chunk.count;
    } else {
      const lines = lineBatch(writer, run.progress);
      for (const line of ndjsonLines(chunkText(chunk.data))) {
        const resource = JSON.parse(line) as StoredResource;
        if (seen) {
          if (remember) seen.add(resource.id);
          else if (seen.has(resource.id)) continue;
        }
        if (how?.typeFilter && !how.typeFilter(resource)) continue;
        associated?.note(resourceType, resource.id);
        const out: FhirResource = how?.kept ? projectElements(resource, how.kept) : resource;
        await lines.add(how?.kept ? JSON.stringify(out) : line);
      }
      await lines.flush();
    }
    run.report(false);
  }
}

/**
 * The associated Provenance, after every type: one pass over the snapshot's Provenance (two for
 * Latest), whatever the export level, since in R4 a Provenance is in a patient's compartment only
 * when it targets the Patient itself. They join the file of Provenance exported for `_type`, if any.
 */
async function writeAssociated(
  run: ExportRun,
  associated: AssociatedProvenance,
  provenanceWriter: NdjsonFileWriter | undefined,
): Promise<void> {
  const { reader, task } = run;
  const writer = provenanceWriter ?? run.newWriter('Provenance', { kind: 'output', type: 'Provenance' });
  const kept = run.selectionOf('Provenance');
  const lines = lineBatch(writer, run.progress);
  const read = () =>
    reader.readResources(task.projectId, task.snapshot, { resourceType: 'Provenance', reuseChunks: true });
  for await (const { line, resource } of associated.select(read, run.checkAborted)) {
    if (await lines.add(kept ? JSON.stringify(projectElements(resource, kept)) : line)) run.report(false);
  }
  await lines.flush();
  await finishFiles(writer, 'Provenance', run.result.output);
  run.report(true);
}

/** Collects NDJSON lines for `writer` and writes them in batches of about `BATCH_CHARS`. */
function lineBatch(writer: LineSink, progress: ExportProgress) {
  let batch = '';
  let count = 0;
  const flush = async (): Promise<void> => {
    if (count === 0) return;
    await writer.write(batch, count);
    progress.resources += count;
    batch = '';
    count = 0;
  };
  return {
    /** Adds a line (without its newline); true when that wrote a batch. */
    add: async (line: string): Promise<boolean> => {
      batch += `${line}\n`;
      count += 1;
      if (batch.length < BATCH_CHARS) return false;
      await flush();
      return true;
    },
    flush,
  };
}

/**
 * The `_typeFilter` test of each filtered type, from the searches parsed at kick-off (or, for a job
 * kept before they were, from its `typeFilters`). The search registry is loaded only when a filter
 * applies: an export without one neither waits for it nor parses a line.
 */
async function typeFilterTestsOf(
  params: ExportTask['params'],
): Promise<Map<string, (resource: FhirResource) => boolean>> {
  const given = params.typeFilters ?? [];
  if (given.length === 0 && !params.typeFilterSearches?.length) return new Map();
  const registry = await loadSearchRegistry();
  const searches: TypeFilterSearch[] =
    params.typeFilterSearches ??
    given.map((filter) => {
      const parsed = parseTypeFilter(registry, filter);
      if ('problem' in parsed) throw new PlatformError('ERR_INVALID_TYPE_FILTER', parsed.problem);
      return parsed.search;
    });
  return typeFilterTests(registry, searches);
}

/** True when the snapshot holds at least one resource of `resourceType`. */
async function hasAny(
  reader: ExportReader,
  projectId: string,
  snapshot: ExportTask['snapshot'],
  resourceType: string,
): Promise<boolean> {
  for await (const chunk of reader.readResources(projectId, snapshot, { resourceType, reuseChunks: true })) {
    if (chunk.count > 0) return true;
  }
  return false;
}
