import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * The three test projects (`npm run test:unit`, `test:http`, `test:slow`; `npm test` runs all).
 * Every test file belongs to exactly one: test/projects.test.ts checks that, and that a file's
 * content fits its project (no server, process or database in `unit`; no Node child process in
 * `http`). A new file lands in `http` unless listed here.
 */

/**
 * Child processes, kill rounds, the command line, end-to-end, packaging, docs and benchmark runs,
 * and the differential runs over whole corpora (minutes of CPU each).
 */
export const SLOW_TESTS = [
  'test/search/differential*.test.ts',
  'test/search/compiled-paths.test.ts',
  'test/fhir/validation/differential.test.ts',
  'test/bench/**/*.test.ts',
  'test/cli/**/*.test.ts',
  'test/docs/**/*.test.ts',
  'test/e2e/**/*.test.ts',
  'test/scripts/**/*.test.ts',
  'test/**/*kill.test.ts',
  'test/dist-entries.test.ts',
  'test/auth/shared-limits.test.ts',
  'test/bulk/dist-worker.test.ts',
  'test/bulk/import-round-trip.test.ts',
  'test/bulk/multi-instance.test.ts',
  'test/security/soak.test.ts',
  'test/storage/backup.test.ts',
  'test/storage/postgres-replicas.test.ts',
];

/** Pure modules and embedded stores: no HTTP server, no child process, no PostgreSQL. */
export const UNIT_TESTS = [
  'test/layering.test.ts',
  'test/projects.test.ts',
  'test/audit/build-event.test.ts',
  'test/audit/export-scope.test.ts',
  'test/audit/refusal-counter.test.ts',
  'test/audit/trail.test.ts',
  'test/auth/client-assertion.test.ts',
  'test/auth/client-secret.test.ts',
  'test/auth/data-access.test.ts',
  'test/auth/group-roles.test.ts',
  'test/auth/id-token-signature.test.ts',
  'test/auth/public-address.test.ts',
  'test/auth/scopes.test.ts',
  'test/auth/signing-keys.test.ts',
  'test/bulk/export-units.test.ts',
  'test/bulk/kickoff-params.test.ts',
  'test/bulk/provenance.test.ts',
  'test/common/date-range.test.ts',
  'test/common/logger.test.ts',
  'test/common/resource-types.test.ts',
  'test/examples/custom-storage.test.ts',
  'test/fhir/bundle-response.test.ts',
  'test/fhir/compartment.test.ts',
  'test/fhir/fhirpath-patch.test.ts',
  'test/fhir/ndjson-loader.test.ts',
  'test/fhir/scim-owned-guard.test.ts',
  'test/fhir/search-admission.test.ts',
  'test/fhir/search-cursor.test.ts',
  'test/fhir/search-includes.test.ts',
  'test/fhir/search-subset.test.ts',
  'test/project/init-project.test.ts',
  'test/project/new-client.test.ts',
  'test/project/parameters.test.ts',
  'test/project/project-access.test.ts',
  'test/scim/attributes.test.ts',
  'test/scim/filter-evaluator.test.ts',
  'test/scim/filter-parser.test.ts',
  'test/scim/group-mapping.test.ts',
  'test/scim/patch.test.ts',
  'test/scim/user-listing.test.ts',
  'test/scim/user-mapping.test.ts',
  'test/scim/user-service.test.ts',
  'test/search/derived-parameters.test.ts',
  'test/search/extract.test.ts',
  'test/search/match.test.ts',
  'test/search/parse.test.ts',
  'test/search/sort-values.test.ts',
  'test/search/types-read.test.ts',
  'test/storage/batch-log.test.ts',
  'test/storage/chunk-copy.test.ts',
  'test/storage/clock.test.ts',
  'test/storage/compartment-option.test.ts',
  'test/storage/file-faults.test.ts',
  'test/storage/file-grants.test.ts',
  'test/storage/identifier-keys.test.ts',
  'test/storage/memory.test.ts',
  'test/storage/model.test.ts',
  'test/storage/old-format.test.ts',
  'test/storage/paced-sort.test.ts',
  'test/storage/record-rules.test.ts',
  'test/storage/record.test.ts',
  'test/storage/result-page.test.ts',
  'test/storage/search-index-build.test.ts',
  'test/storage/search-index-exact.test.ts',
  'test/storage/search-pace.test.ts',
];

const ALL_TESTS = 'test/**/*.test.ts';
const MINUTE = 60_000;

export default defineConfig({
  // The package's own name resolves to its source (as tsconfig.json's `paths`), for examples that
  // import it as a host does.
  resolve: {
    alias: [
      { find: /^fhir-platform-kit$/, replacement: fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
      {
        find: /^fhir-platform-kit\/testing$/,
        replacement: fileURLToPath(new URL('./src/testing/index.ts', import.meta.url)),
      },
    ],
  },
  test: {
    pool: 'forks',
    // Generous limits, not per-test short ones: tests wait for events and readiness lines, and a
    // loaded 2-core machine (CI) may be many times slower than a developer's.
    testTimeout: 2 * MINUTE,
    hookTimeout: 2 * MINUTE,
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: UNIT_TESTS },
      },
      {
        extends: true,
        test: { name: 'http', include: [ALL_TESTS], exclude: [...UNIT_TESTS, ...SLOW_TESTS] },
      },
      {
        extends: true,
        test: { name: 'slow', include: SLOW_TESTS, testTimeout: 10 * MINUTE, hookTimeout: 10 * MINUTE },
      },
    ],
  },
});
