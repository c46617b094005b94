import { distance } from 'fastest-levenshtein';
import { optionError } from './options.js';

/**
 * Every key of an options type, as a value: `Record<keyof T, true>` makes the compiler list each
 * key once, so the runtime list cannot drift from the documented interface.
 */
export type OptionKeys<T> = Record<keyof T, true>;

/** The closest known key, when it is a plausible typo (at most a third of its letters differ). */
function suggestion(key: string, known: string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const d = distance(key.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  return best !== undefined && bestDistance <= Math.max(1, Math.floor(best.length / 3)) ? best : undefined;
}

/**
 * Fails with `InvalidOptionError` (`ERR_INVALID_OPTION`) on a key of `options` that `known` does
 * not list (`fhirPlatform: unknown option exportdir (did you mean exportDir?)`). A typo in an
 * options object would otherwise be silently ignored and its default used.
 * @param prefix how nested options are named (`paths.`), before the key
 * @default prefix ''
 */
export function checkOptionKeys(
  owner: string,
  options: object | undefined,
  known: OptionKeys<object>,
  prefix = '',
): void {
  if (!options || typeof options !== 'object') return;
  const names = Object.keys(known);
  for (const key of Object.keys(options)) {
    if (Object.hasOwn(known, key)) continue;
    const near = suggestion(key, names);
    optionError(
      owner,
      `${prefix}${key}`,
      `unknown option ${prefix}${key}${near ? ` (did you mean ${prefix}${near}?)` : ''}`,
    );
  }
}
