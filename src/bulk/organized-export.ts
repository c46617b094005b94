import type { ExportReadOptions, ExportReader, NdjsonChunk } from '../storage/types.js';
import type { BlockFileWriter } from './block-file-writer.js';
import type { ExportTask } from './export-task.js';
import { chunkText, ndjsonLines } from './ndjson-lines.js';

/*
 * Output organized by patient (Bulk Data 3.0.0 `organizeOutputBy=Patient`, "Bulk Data Output File
 * Organization"): one block per patient, a `Parameters` header naming the Patient, then the Patient
 * itself, then every other resource of its compartment, type after type. Each block is read from
 * the store's compartment reads (`readResources` with one patient), so memory holds one block at
 * most (see BlockFileWriter), and resources in no patient's compartment are not exported.
 */

/** Where an organized export writes one type's lines of a block (through its transforms). */
export type CopyInto = (
  resourceType: string,
  chunks: AsyncIterable<NdjsonChunk> | Iterable<NdjsonChunk>,
) => Promise<void>;

/** What an organized run needs of the export run. */
export interface OrganizedRun {
  reader: ExportReader;
  task: ExportTask;
  writer: BlockFileWriter;
  /** Copies chunks of one type into the writer's current block. */
  copy: CopyInto;
  checkAborted: () => void;
  report: (force: boolean) => void;
}

/** The header line of a patient's block. */
export function blockHeader(patientId: string): string {
  return JSON.stringify({
    resourceType: 'Parameters',
    parameter: [{ name: 'header', valueReference: { reference: `Patient/${patientId}` } }],
  });
}

/**
 * Writes the block of each patient of `patientIds`: the members in `wholeIds` (added to a Group
 * after `_since`) whole, the others changed after `_since` only; with `_until`, only what changed
 * at or before it. `types` are the compartment types to export (`Patient` first when present).
 */
export async function writePatientBlocks(
  run: OrganizedRun,
  patientIds: readonly string[],
  wholeIds: ReadonlySet<string>,
  types: readonly string[],
): Promise<void> {
  const { reader, task, writer } = run;
  const { params, projectId, snapshot } = task;
  for (const patientId of patientIds) {
    run.checkAborted();
    writer.startBlock(blockHeader(patientId));
    const read = (resourceType: string): AsyncIterable<NdjsonChunk> => {
      const options: ExportReadOptions = { resourceType, patientIds: [patientId], reuseChunks: true };
      if (params.sinceMs !== undefined && !wholeIds.has(patientId)) options.since = params.sinceMs;
      if (params.untilMs !== undefined) options.until = params.untilMs;
      return reader.readResources(projectId, snapshot, options);
    };
    for (const resourceType of types) {
      if (resourceType === 'Patient')
        await run.copy('Patient', await patientFirst(read('Patient'), patientId));
      else await run.copy(resourceType, read(resourceType));
    }
    await writer.endBlock();
    run.report(false);
  }
}

/**
 * The Patient resources of a compartment (the Patient, and Patients linking to it), the Patient
 * itself first: a few lines, read whole.
 */
async function patientFirst(chunks: AsyncIterable<NdjsonChunk>, patientId: string): Promise<NdjsonChunk[]> {
  const own: string[] = [];
  const others: string[] = [];
  const idOf = `"id":${JSON.stringify(patientId)}`;
  for await (const chunk of chunks) {
    for (const line of ndjsonLines(chunkText(chunk.data))) {
      // Stored JSON is compact; parsed only to tell a linked Patient that mentions the id.
      if (line.includes(idOf) && (JSON.parse(line) as { id?: string }).id === patientId) own.push(line);
      else others.push(line);
    }
  }
  const lines = [...own, ...others];
  return lines.length === 0 ? [] : [{ data: `${lines.join('\n')}\n`, count: lines.length }];
}
