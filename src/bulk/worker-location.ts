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
 * 1. `export-worker.js` next to the running module (the built package: `dist/index.js` and
 *    `dist/index.cjs` both use the ESM worker, which can import ESM and CJS store modules);
 * 2. `export-worker-tsx.mjs` next to the TypeScript source (tests and `tsx`), a shim that registers
 *    tsx in the worker thread and imports `export-worker.ts`.
 * Throws when neither exists; pass `workerFilename` to the pool to override.
 */
export function defaultWorkerFilename(): string {
  const dir = path.dirname(thisFile());
  const built = path.join(dir, 'export-worker.js');
  if (existsSync(built)) return built;
  const shim = path.join(dir, 'export-worker-tsx.mjs');
  if (existsSync(shim) && existsSync(path.join(dir, 'export-worker.ts'))) return shim;
  throw new PlatformError(
    'ERR_EXPORT_WORKER_NOT_FOUND',
    `Export worker not found next to ${dir}; build with tsup or pass workerFilename`,
  );
}
