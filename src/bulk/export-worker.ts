import type { ExportFileStore, ExportReader, StorageDescriptor } from '../storage/types.js';
import { runExport } from './export-runner.js';
import type { ExportTask, ExportTaskResult } from './export-task.js';
import { PlatformError } from '../errors.js';
import { toCrossing } from './worker-errors.js';

/** `import(module)[exportName](options)`, as a descriptor says. */
async function openFrom<T>(descriptor: StorageDescriptor): Promise<T> {
  const module = (await import(descriptor.module)) as Record<string, unknown>;
  const factory = module[descriptor.exportName];
  if (typeof factory !== 'function') {
    throw new PlatformError(
      'ERR_EXPORT_TASK_INVALID',
      `${descriptor.module} has no export ${descriptor.exportName}`,
    );
  }
  const open = factory as (options: Record<string, unknown>) => T | Promise<T>;
  return await open(descriptor.options);
}

/**
 * The piscina worker entry (built as `dist/export-worker.js` / `.cjs`): reopens a read-only view of
 * the store from the task's descriptor (and the export file store from `task.files`, when the files
 * do not go to a directory), runs the export and reports progress over the task's port.
 */
export default async function exportTask(task: ExportTask): Promise<ExportTaskResult> {
  try {
    return await runTask(task);
  } catch (error) {
    throw toCrossing(error);
  }
}

async function runTask(task: ExportTask): Promise<ExportTaskResult> {
  if (!task.descriptor)
    throw new PlatformError('ERR_EXPORT_TASK_INVALID', 'The export task has no storage descriptor');
  const reader = await openFrom<ExportReader>(task.descriptor);
  const port = task.progressPort;
  let files: ExportFileStore | undefined;
  try {
    files = task.files ? await openFrom<ExportFileStore>(task.files) : undefined;
    return await runExport(
      reader,
      { ...task, progressPort: undefined },
      {
        onProgress: port ? (progress) => port.postMessage(progress) : undefined,
        ...(files
          ? {
              sink: files.sink({
                projectId: task.projectId,
                jobId: task.jobId,
                ...(task.run ? { run: task.run } : {}),
              }),
            }
          : {}),
      },
    );
  } finally {
    port?.close();
    await files?.close();
    await reader.close();
  }
}
