import type { Storage, StorageDescriptor } from '../../src/storage/types.js';

const SLOW_READER_MODULE = new URL('../bulk/fixtures/slow-export-reader.mjs', import.meta.url).href;

/**
 * Slows the exports of `storage` run in worker threads: from now on its `descriptor` opens the
 * store's own reader through `slow-export-reader.mjs`, which waits `delayMs()` ms (read at each
 * kick-off's run) after each chunk, and with `gate` reads no resource of `gate.type` until the file
 * `gate.file` exists. A public extension point (the descriptor a worker reopens the
 * store from), so the export code has no test hook. Returns `storage`.
 */
export function slowExports<S extends Storage>(
  storage: S,
  delayMs: () => number,
  gate?: { file: string; type: string },
): S {
  const inner = storage.descriptor;
  if (!inner) throw new Error('slowExports: the store has no descriptor (its exports run in this thread)');
  Object.defineProperty(storage, 'descriptor', {
    configurable: true,
    get: (): StorageDescriptor => {
      const ms = delayMs();
      if (ms <= 0 && !gate) return inner;
      return {
        module: SLOW_READER_MODULE,
        exportName: 'openSlowExportReader',
        options: { inner, delayMs: Math.max(0, ms), ...(gate ? { gate } : {}) },
      };
    },
  });
  return storage;
}
