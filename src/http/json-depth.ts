/**
 * Nesting-depth limit for untrusted JSON. `JSON.parse` itself copes with any depth (V8's parser is
 * not recursive), but every recursive walk afterwards (structure validation, `JSON.stringify`,
 * `structuredClone`, reference rewriting) overflows the stack a few thousand levels down. Such
 * documents are kept out either by a scan of the raw text (no recursion, no allocation: for text that
 * is not parsed here) or, for text that is parsed anyway, by a walk of the parsed value that stops
 * at the limit (about a sixth of the scan's time on FHIR JSON: it visits values, not bytes).
 */

import { positiveInteger } from '../common/options.js';

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

/**
 * True when a parsed JSON value nests objects/arrays deeper than `maxDepth` (the same measure as
 * {@link jsonNestingExceeds}: `{}` is depth 1). The recursion stops at `maxDepth`, so it never goes
 * deeper than the limit whatever the value.
 */
export function valueNestingExceeds(value: unknown, maxDepth: number): boolean {
  return typeof value === 'object' && value !== null && containerExceeds(value, maxDepth - 1);
}

/** Whether `container` (itself within the limit when `left >= 0`) holds anything too deep. */
function containerExceeds(container: object, left: number): boolean {
  if (left < 0) return true;
  if (Array.isArray(container)) {
    for (let i = 0; i < container.length; i++) {
      const item: unknown = container[i];
      if (typeof item === 'object' && item !== null && containerExceeds(item, left - 1)) return true;
    }
    return false;
  }
  const record = container as Record<string, unknown>;
  for (const key in record) {
    const item = record[key];
    if (typeof item === 'object' && item !== null && containerExceeds(item, left - 1)) return true;
  }
  return false;
}

// Two copies of one loop, so that each stays monomorphic (string or byte reads). A string is
// skipped in the same loop (a backslash skips the character after it): most JSON strings are a few
// characters long, for which a call to the native `indexOf` per string costs more than it saves.
function textExceeds(text: string, maxDepth: number): boolean {
  const n = text.length;
  let depth = 0;
  let i = 0;
  while (i < n) {
    const c = text.charCodeAt(i++);
    if (c === QUOTE) {
      while (i < n) {
        const d = text.charCodeAt(i++);
        if (d === QUOTE) break;
        if (d === BACKSLASH) i++;
      }
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > maxDepth) return true;
    } else if ((c === CLOSE_BRACE || c === CLOSE_BRACKET) && depth > 0) depth--;
  }
  return false;
}

function bytesExceeds(bytes: Uint8Array, maxDepth: number): boolean {
  const n = bytes.length;
  let depth = 0;
  let i = 0;
  while (i < n) {
    const c = bytes[i++]!;
    if (c === QUOTE) {
      while (i < n) {
        const d = bytes[i++]!;
        if (d === QUOTE) break;
        if (d === BACKSLASH) i++;
      }
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > maxDepth) return true;
    } else if ((c === CLOSE_BRACE || c === CLOSE_BRACKET) && depth > 0) depth--;
  }
  return false;
}

/** Checks a `maxJsonDepth` option: a positive integer, or the default when absent. */
export function resolveMaxJsonDepth(owner: string, value: number | undefined): number {
  return positiveInteger(owner, 'maxJsonDepth', value, DEFAULT_MAX_JSON_DEPTH);
}
