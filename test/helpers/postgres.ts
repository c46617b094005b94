import { describe, it } from 'vitest';

/** True under CI (`CI` set, as .ci/run does), where a PostgreSQL suite may not be skipped. */
const inCi = (): boolean => !!process.env.CI && process.env.CI !== 'false' && process.env.CI !== '0';

/**
 * The PostgreSQL server of the tests (`FPK_TEST_POSTGRES_URL`). Without it: under CI, throws (a
 * missing database fails the run); elsewhere, warns, declares `suite` as skipped, saying what to
 * set, and answers undefined, so that the caller declares nothing else.
 * @param suite what is skipped, as the skip message names it
 */
export function postgresTestUrl(suite: string): string | undefined {
  const url = process.env.FPK_TEST_POSTGRES_URL;
  if (url) return url;
  if (inCi())
    throw new Error(
      `${suite}: FPK_TEST_POSTGRES_URL is required in CI (PostgreSQL tests may not be skipped)`,
    );
  console.warn(
    `Skipping "${suite}": set FPK_TEST_POSTGRES_URL (e.g. postgres://postgres@127.0.0.1:5432/test)`,
  );
  describe.skip(`${suite} (FPK_TEST_POSTGRES_URL is not set)`, () => {
    it('runs against PostgreSQL', () => undefined);
  });
  return undefined;
}
