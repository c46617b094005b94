import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

// `pg`, `pg-cursor` and `pg-copy-streams` are optional peer dependencies: the package root never
// loads them, only the `fhir-platform-kit/postgres` entry does. Checked on the build, in fresh
// processes.

const DIST = fileURLToPath(new URL('../dist/', import.meta.url));
const run = promisify(execFile);

function requireDist(): void {
  for (const file of ['index.js', 'index.cjs', 'postgres.js', 'postgres.cjs']) {
    if (!fs.existsSync(`${DIST}${file}`)) {
      throw new Error(`dist/${file} is missing: run \`npm run build\` first (npm test builds it)`);
    }
  }
}

/** Runs `code` in a fresh Node process (CommonJS `-e`) and returns its standard output. */
async function node(code: string, args: string[] = []): Promise<string> {
  const { stdout } = await run(process.execPath, [...args, '-e', code], { cwd: DIST });
  return stdout.trim();
}

// A resolve hook that makes the PostgreSQL packages unresolvable, as in a host without them.
const WITHOUT_PG = `data:text/javascript,${encodeURIComponent(`
  import { register } from 'node:module';
  register('data:text/javascript,' + encodeURIComponent(
    'export async function resolve(specifier, context, next) {' +
    '  if (["pg", "pg-cursor", "pg-copy-streams"].includes(specifier))' +
    '    throw new Error("Cannot find package " + specifier);' +
    '  return next(specifier, context);' +
    '}'));
`)}`;

describe('the package root does not load pg', () => {
  it('CommonJS: requiring dist/index.cjs loads no pg module; dist/postgres.cjs does', async () => {
    requireDist();
    const loaded = (entry: string) =>
      node(`
        require('./${entry}');
        const pg = Object.keys(require.cache).filter((f) => /[\\\\/]node_modules[\\\\/]pg(-[a-z]+)*[\\\\/]/.test(f));
        console.log(pg.length);`);
    expect(await loaded('index.cjs')).toBe('0');
    expect(Number(await loaded('postgres.cjs'))).toBeGreaterThan(0);
  });

  it('ES modules: dist/index.js imports and works with pg unresolvable; dist/postgres.js needs it', async () => {
    requireDist();
    const imported = (entry: string) =>
      node(
        `import('./${entry}').then(
          (m) => console.log(typeof (m.fileStorage ?? m.postgresStorage)),
          (e) => console.log(String(e.message)))`,
        ['--import', WITHOUT_PG],
      );
    expect(await imported('index.js')).toBe('function');
    expect(await imported('postgres.js')).toMatch(/Cannot find package pg/);
  });
});
