import type { ExportReader, StorageDescriptor } from '../storage/types.js';
import { runExport } from './export-runner.js';
import type { ExportTask, ExportTaskResult } from './export-task.js';
import { PlatformError } from '../errors.js';

async function openReader(descriptor: StorageDescriptor): Promise<ExportReader> {
  const module = (await import(descriptor.module)) as Record<string, unknown>;
  const factory = module[descriptor.exportName];
  if (typeof factory !== 'function') {
    throw new PlatformError(
      'ERR_EXPORT_TASK_INVALID',
      `${descriptor.module} has no export ${descriptor.exportName}`,
    );
  }
  const open = factory as (options: Record<string, unknown>) => ExportReader | Promise<ExportReader>;
  return await open(descriptor.options);
}

/**
 * The piscina worker entry (built as `dist/export-worker.js` / `.cjs`): reopens a read-only view of
 * the store from the task's descriptor, runs the export and reports progress over the task's port.
 */
export default async function exportTask(task: ExportTask): Promise<ExportTaskResult> {
  if (task.crash === 'exit') process.exit(1);
  if (task.crash === 'throw') throw new PlatformError('ERR_INTERNAL', 'Export worker crash (test hook)');
  if (!task.descriptor)
    throw new PlatformError('ERR_EXPORT_TASK_INVALID', 'The export task has no storage descriptor');
  const reader = await openReader(task.descriptor);
  const port = task.progressPort;
  try {
    return await runExport(
      reader,
      { ...task, progressPort: undefined },
      {
        onProgress: port ? (progress) => port.postMessage(progress) : undefined,
      },
    );
  } finally {
    port?.close();
    await reader.close();
  }
}
