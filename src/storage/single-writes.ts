import type { FhirResource, ResourceWrite, StoredResource, WriteOptions, WriteResult } from './types.js';

/** An adapter's `writeResources`, bound to one project. */
export type BatchWrite = (writes: ResourceWrite[]) => Promise<WriteResult[]>;

/** `updateResource` in terms of the adapter's all-or-nothing `writeResources`. */
export async function updateThroughBatch(
  write: BatchWrite,
  resource: FhirResource & { id: string },
  options?: WriteOptions,
): Promise<{ resource: StoredResource; created: boolean }> {
  const [result] = await write([
    { op: 'update', resource, ...(options?.ifMatch !== undefined ? { ifMatch: options.ifMatch } : {}) },
  ]);
  return { resource: result!.resource!, created: result!.created ?? false };
}

/** `deleteResource` in terms of the adapter's all-or-nothing `writeResources`. */
export async function deleteThroughBatch(
  write: BatchWrite,
  resourceType: string,
  id: string,
  options?: WriteOptions,
): Promise<void> {
  await write([
    {
      op: 'delete',
      resourceType,
      id,
      ...(options?.ifMatch !== undefined ? { ifMatch: options.ifMatch } : {}),
    },
  ]);
}
