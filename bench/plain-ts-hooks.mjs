/* The module hooks of `plain-ts.mjs` (they run on Node's loader thread). */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import process from 'node:process';
import { fileURLToPath, URL } from 'node:url';
import { transform } from 'esbuild';

const TS = /\.(ts|mts)$/;

/** A relative `./x.js` import from a TypeScript module names `./x.ts` when only that exists. */
export async function resolve(specifier, context, next) {
  if (
    context.parentURL &&
    TS.test(context.parentURL) &&
    /^\.\.?\//.test(specifier) &&
    specifier.endsWith('.js')
  ) {
    const url = new URL(specifier, context.parentURL);
    if (!existsSync(fileURLToPath(url))) {
      const ts = new URL(specifier.replace(/\.js$/, '.ts'), context.parentURL);
      if (existsSync(fileURLToPath(ts))) return { url: ts.href, shortCircuit: true };
    }
  }
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (!TS.test(url)) return next(url, context);
  const file = fileURLToPath(url);
  const { code } = await transform(await readFile(file, 'utf8'), {
    loader: 'ts',
    format: 'esm',
    target: `node${process.versions.node.split('.')[0]}`,
    sourcefile: file,
    sourcemap: 'inline',
  });
  return { format: 'module', source: code, shortCircuit: true };
}
