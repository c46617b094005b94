import { describe, it } from 'vitest';

/**
 * The PostgreSQL server of the tests (`FPK_TEST_POSTGRES_URL`). Without it, registers in place of
 * the suite a failing test under CI (a missing database must fail the run) or a skipped one
 * elsewhere, and returns undefined.
 */
export function postgresTestUrl(suite: string): string | undefined {
  const url = process.env.FPK_TEST_POSTGRES_URL;
  if (url) return url;
  if (process.env.CI) {
    describe(suite, () => {
      it('needs a database in CI', () => {
        throw new Error('FPK_TEST_POSTGRES_URL is required in CI');
      });
    });
  } else {
    console.warn(
      `Skipping "${suite}": set FPK_TEST_POSTGRES_URL (e.g. postgres://postgres@127.0.0.1:5432/test)`,
    );
    describe.skip(`${suite} (FPK_TEST_POSTGRES_URL is not set)`, () => {
      it('needs a database', () => undefined);
    });
  }
  return undefined;
}
