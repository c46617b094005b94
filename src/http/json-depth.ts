import { InvalidOptionError } from '../errors.js';
/**
 * Nesting-depth limit for untrusted JSON. `JSON.parse` itself copes with any depth, but every
 * recursive walk afterwards (structure validation, `JSON.stringify`, `structuredClone`, reference
 * rewriting) overflows the stack a few thousand levels down. Checking the raw text first keeps such
 * documents out: one pass, no recursion, no allocation.
 */

/**
 * Deepest nesting of objects and arrays accepted in a request's JSON (a body, an NDJSON line, a JWT
 * header or payload). `{}` is depth 1, `{"a":[{}]}` depth 3. FHIR resources rarely go past 20
 * (a Bundle entry adds 3); 100 leaves room for deeply nested Questionnaire items.
 */
export const DEFAULT_MAX_JSON_DEPTH = 100;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/**
 * True when `json` nests objects/arrays deeper than `maxDepth`. Brackets inside strings do not
 * count; the text need not be valid JSON (the parser rejects that afterwards). Accepts text or its
 * UTF-8 bytes: the characters that matter are ASCII, which never occur inside a multi-byte sequence.
 */
export function jsonNestingExceeds(json: string | Uint8Array, maxDepth: number): boolean {
  return typeof json === 'string' ? textExceeds(json, maxDepth) : bytesExceeds(json, maxDepth);
}

// Two copies of one loop, so that each stays monomorphic (string or byte reads). Strings are
// skipped with the native `indexOf`, so the loop itself only visits the structure.
function textExceeds(text: string, maxDepth: number): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      let end = text.indexOf('"', i + 1);
      while (end !== -1 && escapedInText(text, i, end)) end = text.indexOf('"', end + 1);
      if (end === -1) return false;
      i = end;
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > maxDepth) return true;
    } else if ((c === CLOSE_BRACE || c === CLOSE_BRACKET) && depth > 0) depth--;
  }
  return false;
}

function bytesExceeds(bytes: Uint8Array, maxDepth: number): boolean {
  let depth = 0;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i]!;
    if (c === QUOTE) {
      let end = bytes.indexOf(QUOTE, i + 1);
      while (end !== -1 && escapedInBytes(bytes, i, end)) end = bytes.indexOf(QUOTE, end + 1);
      if (end === -1) return false;
      i = end;
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > maxDepth) return true;
    } else if ((c === CLOSE_BRACE || c === CLOSE_BRACKET) && depth > 0) depth--;
  }
  return false;
}

/** Whether the quote at `at` is escaped: an odd run of backslashes before it (after `start`). */
function escapedInText(text: string, start: number, at: number): boolean {
  let k = at - 1;
  while (k > start && text.charCodeAt(k) === BACKSLASH) k--;
  return (at - 1 - k) % 2 === 1;
}

function escapedInBytes(bytes: Uint8Array, start: number, at: number): boolean {
  let k = at - 1;
  while (k > start && bytes[k] === BACKSLASH) k--;
  return (at - 1 - k) % 2 === 1;
}

/** Checks a `maxJsonDepth` option: a positive integer, or the default when absent. */
export function resolveMaxJsonDepth(owner: string, value: number | undefined): number {
  if (value === undefined) return DEFAULT_MAX_JSON_DEPTH;
  if (!Number.isInteger(value) || value < 1)
    throw new InvalidOptionError(`${owner}: maxJsonDepth must be a positive integer`);
  return value;
}
