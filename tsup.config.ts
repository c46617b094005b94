import { defineConfig, type Options } from 'tsup';

// The command line (src/cli/) uses the library through its public entries, `src/index.ts` and
// `src/postgres.ts`. In the build those imports stay imports of `./index.js` and `./postgres.js`,
// so dist/cli.js runs the same library modules the package exports (one copy, and the export
// worker's store descriptor names the package entry, not the bin).
const libraryExternal: NonNullable<Options['esbuildPlugins']>[number] = {
  name: 'cli-library-external',
  setup(build) {
    build.onResolve({ filter: /^\.\.\/(index|postgres)\.js$/ }, (args) =>
      /[\\/]src[\\/]cli[\\/]/.test(args.importer)
        ? { path: args.path.replace('../', './'), external: true }
        : undefined,
    );
  },
};

export default defineConfig([
  {
    // `postgres` is the PostgreSQL adapter (`fhir-platform-kit/postgres`: only it imports `pg`);
    // `testing` is the `fhir-platform-kit/testing` subpath (the storage contract suite).
    entry: {
      index: 'src/index.ts',
      postgres: 'src/postgres.ts',
      testing: 'src/testing/index.ts',
    },
    format: ['esm', 'cjs'],
    dts: { entry: { index: 'src/index.ts', postgres: 'src/postgres.ts', testing: 'src/testing/index.ts' } },
    // vitest is the host's (an optional peer dependency): never bundled into `testing`.
    external: ['vitest'],
    sourcemap: true,
    // Everything but the command line and the export worker, which the other builds write.
    clean: ['!cli.js', '!cli.js.map', '!export-worker.*'],
    target: 'node20',
    // Shared chunks: the entries must share one copy of every class (errors are checked with
    // instanceof across them).
    splitting: true,
    // CommonJS chunks come from an ES module build: `import.meta.url` needs its CommonJS shim.
    shims: true,
  },
  {
    // The export worker, built whole (no shared chunks) so piscina can load it by path from dist/
    // (ESM hosts load export-worker.js, CommonJS hosts export-worker.cjs: see
    // src/bulk/worker-location.ts). It imports the store module a task names with a real dynamic
    // `import()`: the CommonJS output of a split build turns `import()` into `require()`, which
    // cannot load a `file:` URL nor every ES module.
    entry: { 'export-worker': 'src/bulk/export-worker.ts' },
    format: ['esm', 'cjs'],
    sourcemap: true,
    clean: false,
    target: 'node20',
    splitting: false,
    shims: true,
  },
  {
    // The `fhir-platform-kit` bin: ESM only; tsup keeps main.ts's shebang and makes the file executable.
    entry: { cli: 'src/cli/main.ts' },
    format: ['esm'],
    sourcemap: true,
    clean: false,
    target: 'node20',
    splitting: false,
    esbuildPlugins: [libraryExternal],
  },
]);
