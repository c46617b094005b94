import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PlatformError } from '../errors.js';

/** The file this module was loaded from: `dist/index.js`, `dist/index.cjs` or `src/bulk/worker-location.ts`. */
function thisFile(): string {
  // CJS build: `__filename`; ESM: `import.meta.url` (never evaluated in the CJS build).
  return typeof __filename === 'string' ? __filename : fileURLToPath(import.meta.url);
}

/**
 * Finds the export worker entry for piscina:
 * 1. the built worker next to the running module, in the running module's format: `dist/index.js`
 *    uses `export-worker.js`, `dist/index.cjs` uses `export-worker.cjs` (both import the store
 *    module named by a task's descriptor, ESM or CommonJS, with a dynamic `import()`);
 * 2. `export-worker-tsx.mjs` next to the TypeScript source (tests and `tsx`), a shim that registers
 *    tsx in the worker thread and imports `export-worker.ts`.
 * Throws when neither exists; pass `workerFilename` to the pool to override.
 */
export function defaultWorkerFilename(): string {
  const file = thisFile();
  const dir = path.dirname(file);
  const built = path.join(dir, file.endsWith('.cjs') ? 'export-worker.cjs' : 'export-worker.js');
  if (existsSync(built)) return built;
  const shim = path.join(dir, 'export-worker-tsx.mjs');
  if (existsSync(shim) && existsSync(path.join(dir, 'export-worker.ts'))) return shim;
  throw new PlatformError(
    'ERR_EXPORT_WORKER_NOT_FOUND',
    `Export worker not found next to ${dir}; build with tsup or pass workerFilename`,
  );
}
