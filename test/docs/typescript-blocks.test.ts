import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { beforeAll, describe, expect, it } from 'vitest';

/*
 * Every ```ts block of the README and docs/*.md type-checks as a host's TypeScript would: strict,
 * exactOptionalPropertyTypes and noUncheckedIndexedAccess, against the package's source (its own
 * name resolving there, as in tsconfig.json). Many blocks are fragments that use what an earlier
 * block or the text made (`storage`, `app`): a name that is not declared, or a relative import of
 * the host's own module, is not an error here; anything else is.
 */

const REPO = path.resolve(import.meta.dirname, '../..');

/** Diagnostics of a fragment's missing context: a name or module the page defines elsewhere. */
const CONTEXT_CODES = new Set([
  2304, // Cannot find name 'x'.
  2552, // Cannot find name 'x'. Did you mean 'y'?
  18004, // No value exists in scope for the shorthand property 'x'.
]);

interface Block {
  /** `README.md:313`: the page and the block's first line. */
  name: string;
  /** The file it is checked as. */
  file: string;
  text: string;
}

/** The ```ts blocks of `page`, but for JavaScript files shown as TypeScript (`// server.mjs`). */
function typescriptBlocks(page: string): Block[] {
  const text = fs.readFileSync(path.join(REPO, page), 'utf8');
  return [...text.matchAll(/^```ts\n([\s\S]*?)^```/gm)]
    .filter((match) => !/^\/\/ \S+\.m?js\b/.test(match[1]!))
    .map((match) => {
      const line = text.slice(0, match.index).split('\n').length + 1;
      return {
        name: `${page}:${line}`,
        file: path.join(REPO, `${page.replace(/\W/g, '-')}-${line}.mts`),
        // A module of its own, so that blocks do not share a global scope.
        text: `${match[1]!}\nexport {};\n`,
      };
    });
}

const PAGES = [
  'README.md',
  ...fs
    .readdirSync(path.join(REPO, 'docs'))
    .filter((file) => file.endsWith('.md'))
    .map((file) => `docs/${file}`),
];
const BLOCKS = PAGES.flatMap(typescriptBlocks);

function hostOptions(): ts.CompilerOptions {
  const config = ts.parseJsonConfigFileContent(
    ts.readConfigFile(path.join(REPO, 'tsconfig.json'), (file) => ts.sys.readFile(file)).config,
    ts.sys,
    REPO,
  );
  return {
    ...config.options,
    exactOptionalPropertyTypes: true,
    noEmit: true,
    paths: { ...config.options.paths, 'fhir-platform-kit/postgres': ['./src/postgres.ts'] },
  };
}

/** One program over every block (the blocks as files of the repository root that are not on disk). */
function compileBlocks(): Map<string, string[]> {
  const options = hostOptions();
  const files = new Map(BLOCKS.map((block) => [block.file, block.text]));
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, language, ...rest) => {
    const text = files.get(name);
    return text === undefined
      ? getSourceFile(name, language, ...rest)
      : ts.createSourceFile(name, text, language);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => files.has(name) || fileExists(name);
  const program = ts.createProgram([...files.keys()], options, host);
  return new Map(
    BLOCKS.map((block) => [
      block.file,
      ts
        .getPreEmitDiagnostics(program, program.getSourceFile(block.file))
        .filter((d) => !CONTEXT_CODES.has(d.code) && !isRelativeImport(d))
        .map((d) => {
          const line =
            d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : -1;
          return `line ${line + 1}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
        }),
    ]),
  );
}

/** "Cannot find module './my-storage.js'": the host's own module, which the page only names. */
function isRelativeImport(diagnostic: ts.Diagnostic): boolean {
  return (
    diagnostic.code === 2307 &&
    /module '\.\.?\//.test(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'))
  );
}

let problems: Map<string, string[]>;
beforeAll(() => {
  problems = compileBlocks();
});

describe('TypeScript blocks of the README and docs', () => {
  it('finds the blocks, among them the README’s PostgreSQL store', () => {
    expect(BLOCKS.some((b) => b.name.startsWith('README.md') && b.text.includes('postgresStorage('))).toBe(
      true,
    );
  });

  it.each(BLOCKS.map((block) => [block.name, block] as const))(
    '%s type-checks under strict and exactOptionalPropertyTypes',
    (_name, block) => {
      expect(problems.get(block.file)).toEqual([]);
    },
  );
});
