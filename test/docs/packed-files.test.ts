// What `npm pack` puts in the tarball: the reference docs, not the run record. The measurement
// history lives in history/ at the repository root, which package.json's `files` leaves out, and
// docs/performance.md stays a short reference page.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const REPO = new URL('../../', import.meta.url);

interface PackedFile {
  path: string;
  size: number;
}

/** The files `npm pack` would write, without running `prepack` (dist/ is not the question here). */
function packedFiles(): PackedFile[] {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: REPO,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const [pack] = JSON.parse(out) as { files: PackedFile[] }[];
  return pack!.files;
}

describe('the packed tarball', () => {
  const files = packedFiles();
  const paths = files.map((f) => f.path);

  it('holds the README and the reference docs', () => {
    expect(paths).toContain('README.md');
    expect(paths).toContain('docs/performance.md');
    expect(paths).toContain('docs/storage.md');
  });

  it('leaves out the measurement history, which the repository keeps', () => {
    expect(existsSync(new URL('history/performance.md', REPO))).toBe(true);
    expect(paths.filter((p) => p.startsWith('history/') || p.includes('performance-history'))).toEqual([]);
  });

  it('keeps docs/performance.md under 40 KB', () => {
    const page = files.find((f) => f.path === 'docs/performance.md');
    expect(page?.size).toBeLessThan(40 * 1024);
  });
});
