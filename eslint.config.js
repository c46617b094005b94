import fs from 'node:fs';
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * The layers of src/ (docs/architecture.md, "Layers"): the folders each folder may import, every
 * one below it. A folder imports itself freely, and `src/errors.ts` and `src/package-entry.ts`
 * (leaves); the other modules at the root of src/ (index, platform, stores, …) compose the folders
 * and no folder imports them, except `cli/`, which imports the library through `index.ts` only.
 */
export const LAYERS = {
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

/** Root modules of src/ every folder may import. */
const LEAVES = ['errors', 'package-entry'];

/** One `no-restricted-imports` block per folder of {@link LAYERS}. */
function layerRules() {
  const rootModules = fs
    .readdirSync(`${import.meta.dirname}/src`, { withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => entry.name.slice(0, -3));
  return Object.entries(LAYERS).map(([folder, allowed]) => {
    const above = Object.keys(LAYERS).filter((other) => other !== folder && !allowed.includes(other));
    const reachable = folder === 'cli' ? ['index'] : LEAVES;
    const composing = rootModules.filter((name) => !reachable.includes(name));
    const may = allowed.length > 0 ? `only ${allowed.map((f) => `src/${f}`).join(', ')}` : 'no other folder';
    return {
      files: [`src/${folder}/**/*.{ts,mts,mjs}`],
      rules: {
        'no-restricted-imports': [
          'error',
          {
            patterns: [
              {
                regex: `^(\\.\\./)+(${above.join('|')})(/|$)`,
                message: `src/${folder} may import ${may} (docs/architecture.md, "Layers").`,
              },
              {
                regex: `^(\\.\\./)+(${composing.join('|')})\\.js$`,
                message:
                  folder === 'cli'
                    ? 'The command line imports the library through src/index.ts only.'
                    : `src/${folder} may not import the modules that compose the folders (index, platform, stores, …); of the root of src/ only ${LEAVES.map((l) => `${l}.ts`).join(' and ')}.`,
              },
            ],
          },
        ],
      },
    };
  });
}

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', 'data/**', '**/*.cjs', 'test/package/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: { allowDefaultProject: ['*.js', '*.mjs', 'examples/*/*.mjs'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    ...tseslint.configs.disableTypeChecked,
  },
  {
    // Functions a reader takes in at once, files of one concept: a factory that outgrows these
    // becomes named steps or route modules.
    files: ['src/**/*.ts'],
    rules: {
      'max-lines': ['error', { max: 500, skipBlankLines: true, skipComments: true }],
      'max-lines-per-function': ['error', { max: 150, skipBlankLines: true, skipComments: true }],
    },
  },
  ...layerRules(),
);
