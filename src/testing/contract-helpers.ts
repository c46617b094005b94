import { expect } from 'vitest';
import type { NdjsonChunk, NewUser, StoredResource } from '../storage/types.js';

// What the parts of the storage contract share (see storage-contract.ts).
const decoder = new TextDecoder();

/** Reads an export stream back into resources (asserting through vitest), checking each chunk's `count`. */
export async function collectNdjson(chunks: AsyncIterable<NdjsonChunk>): Promise<StoredResource[]> {
  const out: StoredResource[] = [];
  for await (const chunk of chunks) {
    const text = typeof chunk.data === 'string' ? chunk.data : decoder.decode(chunk.data);
    expect(text.endsWith('\n')).toBe(true);
    const lines = text.split('\n').slice(0, -1);
    expect(lines.length).toBe(chunk.count);
    for (const line of lines) out.push(JSON.parse(line) as StoredResource);
  }
  return out;
}

export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

export function code(error: unknown): string | undefined {
  return (error as { code?: string }).code;
}

export async function rejectsWith(promise: Promise<unknown>, expected: string): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    expect(code(error)).toBe(expected);
    return error;
  }
  throw new Error(`expected a rejection with ${expected}`);
}

export const NOT_FOUND = 'ERR_STORAGE_NOT_FOUND';
export const CONFLICT = 'ERR_STORAGE_CONFLICT';
export const PRECONDITION = 'ERR_STORAGE_PRECONDITION_FAILED';

/** The `projectId` inside the record is ignored: the argument of the call wins. */
export function newUser(userName: string, extra: Partial<NewUser> = {}): NewUser {
  return {
    projectId: 'ignored',
    userName,
    userType: 'Practitioner' as const,
    profileId: `prof-${userName}`,
    active: true,
    data: { displayName: userName },
    ...extra,
  };
}
