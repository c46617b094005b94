// The import boundaries of src/ (docs/architecture.md, "Layers"), enforced by the
// `no-restricted-imports` blocks of eslint.config.js: in each folder, an import of a folder above
// it, or of a root module that composes the folders, is a lint error; one of a folder below it is
// not. The table is pinned here and in the docs, so that loosening the rule is a deliberate change.
import fs from 'node:fs';
import { ESLint } from 'eslint';
import tseslint from 'typescript-eslint';
import { describe, expect, it } from 'vitest';

const REPO = new URL('../', import.meta.url);

/** Each folder of src/ and the folders it may import (all below it). */
const LAYERS: Record<string, string[]> = {
  common: [],
  storage: ['common'],
  audit: ['storage', 'common'],
  search: ['storage', 'common'],
  terminology: ['storage', 'common'],
  http: ['audit', 'storage', 'common'],
  auth: ['http', 'audit', 'storage', 'common'],
  fhir: ['terminology', 'search', 'auth', 'http', 'audit', 'storage', 'common'],
  scim: ['auth', 'http', 'audit', 'storage', 'common'],
  project: ['scim', 'auth', 'http', 'audit', 'storage', 'common'],
  bulk: ['fhir', 'terminology', 'search', 'auth', 'http', 'audit', 'storage', 'common'],
  testing: ['audit', 'storage', 'common'],
  cli: ['common'],
};

// The repository's own configuration, without the type-aware rules (the layering needs none).
const eslint = new ESLint({
  cwd: new URL('.', REPO).pathname,
  overrideConfig: [tseslint.configs.disableTypeChecked],
});

/** The layering errors of one import written in a file of `folder` (one level down, or two). */
async function layeringErrors(folder: string, specifier: string, nested = false): Promise<string[]> {
  const file = new URL(`src/${folder}/${nested ? 'deeper/' : ''}layer-probe.ts`, REPO).pathname;
  const [result] = await eslint.lintText(`export * from '${specifier}';\n`, { filePath: file });
  return result!.messages.filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message);
}

describe('layers of src/', () => {
  it('every folder of src/ has its row, here and in docs/architecture.md', () => {
    const folders = fs
      .readdirSync(new URL('src/', REPO), { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => entry.name)
      .sort();
    expect(Object.keys(LAYERS).sort()).toEqual(folders);
    const doc = fs.readFileSync(new URL('docs/architecture.md', REPO), 'utf8');
    for (const [folder, allowed] of Object.entries(LAYERS)) {
      const row = new RegExp(`^\\| \`${folder}/\` +\\| ([^|]*)\\|`, 'm').exec(doc);
      expect(row, `docs/architecture.md has no row for ${folder}/`).not.toBeNull();
      const named = [...row![1]!.matchAll(/`([a-z-]+)\/`/g)].map((m) => m[1]).sort();
      expect(named, `the row of ${folder}/ in docs/architecture.md`).toEqual([...allowed].sort());
    }
  });

  it.each(Object.entries(LAYERS))('%s/ imports the folders below it only', async (folder, allowed) => {
    for (const other of Object.keys(LAYERS)) {
      if (other === folder) continue;
      const errors = await layeringErrors(folder, `../${other}/anything.js`);
      if (allowed.includes(other)) expect(errors, `${folder} -> ${other}`).toEqual([]);
      else expect(errors, `${folder} -> ${other}`).toHaveLength(1);
    }
    // From a sub-folder as well (src/storage/file/, src/fhir/validation/, …).
    const above = Object.keys(LAYERS).find((other) => other !== folder && !allowed.includes(other));
    if (above) expect(await layeringErrors(folder, `../../${above}/anything.js`, true)).toHaveLength(1);
  });

  it.each(Object.keys(LAYERS))(
    '%s/ imports of the root of src/ errors.ts and package-entry.ts only',
    async (folder) => {
      const cli = folder === 'cli';
      for (const name of ['errors', 'package-entry'])
        expect(await layeringErrors(folder, `../${name}.js`)).toHaveLength(cli ? 1 : 0);
      for (const name of ['platform', 'platform-admin', 'stores', 'postgres'])
        expect(await layeringErrors(folder, `../${name}.js`)).toHaveLength(1);
      // The command line goes through the package entry.
      expect(await layeringErrors(folder, '../index.js')).toHaveLength(cli ? 0 : 1);
    },
  );

  it('a type-only import counts as an import', async () => {
    const file = new URL('src/storage/layer-probe.ts', REPO).pathname;
    const [result] = await eslint.lintText(
      `import type { Principal } from '../http/principal.js';\nexport type P = Principal;\n`,
      {
        filePath: file,
      },
    );
    expect(result!.messages.map((m) => m.ruleId)).toContain('no-restricted-imports');
  });
});
