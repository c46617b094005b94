import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { createVitest } from 'vitest/node';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Every test file under test/, relative to the repository (as vitest.config.ts names them). */
function testFiles(): string[] {
  return fs
    .readdirSync(path.join(ROOT, 'test'), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.test.ts'))
    .map((file) => `test/${file.split(path.sep).join('/')}`)
    .sort();
}

/** What a `unit` test may not do: start a server, a process or talk to PostgreSQL. */
const NOT_UNIT: [string, RegExp][] = [
  ['starts a child process', /from 'node:child_process'/],
  ['uses PostgreSQL', /from 'pg'|postgresStorage|postgresTestUrl|FPK_TEST_POSTGRES_URL/],
  ['sends HTTP requests', /^import (?!type)[^;]*from 'supertest'|\bfetch\(/m],
  ['starts a server', /\.listen\(|createServer\(|fhirPlatform\(|startStandalone|createTestApp\(/],
  [
    'uses a helper that serves or reaches PostgreSQL',
    /helpers\/(each-store|pg-[a-z-]+|platform-app|bulk-export|postgres|listen)\.js'/,
  ],
];

/** What an `http` test may not do: run Node (or npm) in a child process. */
const NOT_HTTP: [string, RegExp][] = [
  [
    'runs Node in a child process',
    /process\.execPath|['"](tsx|npm|npx|node)['"]|helpers\/serve-process\.js'/,
  ],
  ['starts PostgreSQL servers', /helpers\/pg-replica\.js'/],
];

describe('vitest projects (vitest.config.ts)', () => {
  const projects = new Map<string, Set<string>>();
  beforeAll(async () => {
    const vitest = await createVitest('test', { watch: false, config: path.join(ROOT, 'vitest.config.ts') });
    try {
      for (const project of vitest.projects) {
        const { testFiles: files } = await project.globTestFiles();
        projects.set(
          project.name,
          new Set(files.map((file) => path.relative(ROOT, file).split(path.sep).join('/'))),
        );
      }
    } finally {
      await vitest.close();
    }
  });

  it('are unit, http and slow', () => {
    expect([...projects.keys()].sort()).toEqual(['http', 'slow', 'unit']);
  });

  it('hold every test file exactly once', () => {
    const files = testFiles();
    expect(files.length).toBeGreaterThan(100);
    const misplaced = files
      .map((file) => ({ file, in: [...projects].filter(([, set]) => set.has(file)).map(([name]) => name) }))
      .filter((entry) => entry.in.length !== 1);
    expect(misplaced).toEqual([]);
    const counted = [...projects.values()].reduce((sum, set) => sum + set.size, 0);
    expect(counted).toBe(files.length);
  });

  it('keep servers, processes and PostgreSQL out of unit, and Node child processes out of http', () => {
    const offences: string[] = [];
    const check = (project: string, rules: [string, RegExp][]) => {
      for (const file of projects.get(project) ?? []) {
        if (file === 'test/projects.test.ts') continue; // its rules name what they look for
        const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
        for (const [what, pattern] of rules)
          if (pattern.test(text)) offences.push(`${project}: ${file} ${what}`);
      }
    };
    check('unit', NOT_UNIT);
    check('http', NOT_HTTP);
    expect(offences).toEqual([]);
  });

  it('rules that catch what they say they catch', () => {
    const fits = (rules: [string, RegExp][], text: string) => rules.some(([, pattern]) => pattern.test(text));
    expect(fits(NOT_UNIT, "import request from 'supertest';")).toBe(true);
    expect(fits(NOT_UNIT, "import type request from 'supertest';")).toBe(false);
    expect(fits(NOT_UNIT, "import { listen } from '../helpers/listen.js';")).toBe(true);
    expect(fits(NOT_HTTP, "spawn(process.execPath, ['--import', 'tsx', 'x.ts'])")).toBe(true);
    expect(fits(NOT_HTTP, "spawn('sh', ['-c', 'sleep 1'])")).toBe(false);
  });
});
