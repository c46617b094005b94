import { defineConfig } from 'tsup';

export default defineConfig({
  // The worker entry is built as its own file so piscina can load it by path from dist/.
  entry: { index: 'src/index.ts', 'export-worker': 'src/bulk/export-worker.ts' },
  format: ['esm', 'cjs'],
  dts: { entry: { index: 'src/index.ts' } },
  sourcemap: true,
  clean: true,
  target: 'node20',
  splitting: false,
});
