/**
 * The bounds a patch is applied within (JSON Patch and FHIRPath Patch alike): how many operations
 * it may hold, checked before any is applied, and how large the patched resource may grow, checked
 * before each operation that adds to it. A JSON Patch `copy` doubles what it copies, so that twenty
 * `copy` operations of one element would otherwise build a resource a million times its size.
 */
import { FhirError } from '../../http/http-error.js';

/** The bounds of one patch (`fhirRouter`'s `maxPatchOperations` and `maxPatchedResourceSize`). */
export interface PatchLimits {
  /** Most operations in one patch; more answer 413 before any is applied. */
  readonly maxOperations: number;
  /**
   * Largest patched resource, in bytes of JSON (strings counted by their UTF-8 length); an
   * operation that would grow it past this answers 413, before it is applied.
   */
  readonly maxResourceSize: number;
}

/** The defaults of `fhirRouter`: 1,000 operations, twice its default `bodyLimit` of 16 MiB. */
export const DEFAULT_PATCH_LIMITS: PatchLimits = {
  maxOperations: 1000,
  maxResourceSize: 32 * 1024 * 1024,
};

/** The option that sets each bound, for the messages that name it. */
const OPTION = { maxOperations: 'maxPatchOperations', maxResourceSize: 'maxPatchedResourceSize' } as const;

/**
 * Throws a 413 (`too-costly`) when a patch of `count` operations holds more than the limits allow.
 * @param what the patch's kind and where its operations are, for the message (`JSON Patch`)
 * @param expression where the operations are in the body (`Parameters.parameter`), when it has one
 */
export function checkOperationCount(
  what: string,
  count: number,
  limits: PatchLimits,
  expression?: string,
): void {
  if (count <= limits.maxOperations) return;
  throw new FhirError(
    413,
    'too-costly',
    `${what}: ${count} operations; at most ${limits.maxOperations} are allowed (${OPTION.maxOperations})`,
    expression === undefined ? {} : { expression: [expression] },
  );
}

/**
 * About the length of `value`'s JSON text in bytes (no whitespace; escapes not counted), measured
 * only until it is known to be over `limit`: the answer is then some number over `limit`, and the
 * cost of measuring never exceeds the cost of `limit` bytes. Iterative, whatever the nesting.
 */
export function jsonSizeUpTo(value: unknown, limit: number): number {
  let size = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0 && size <= limit) {
    const node = pending.pop();
    switch (typeof node) {
      case 'string':
        size += Buffer.byteLength(node, 'utf8') + 2;
        break;
      case 'number':
        size += String(node).length;
        break;
      case 'boolean':
        size += node ? 4 : 5;
        break;
      case 'object':
        if (node === null) size += 4;
        else if (Array.isArray(node)) {
          // Brackets and commas first: a list of a million items is over the limit before it is walked.
          size += Math.max(node.length + 1, 2);
          if (size <= limit) for (const item of node) pending.push(item);
        } else {
          // Braces and commas: one more than the keys, or two for none.
          size += 2;
          let first = true;
          for (const key in node) {
            if (!Object.hasOwn(node, key)) continue;
            size += Buffer.byteLength(key, 'utf8') + (first ? 3 : 4);
            first = false;
            pending.push((node as Record<string, unknown>)[key]);
          }
        }
        break;
      default:
        break;
    }
  }
  return size;
}

/** Where an operation is, for the message and the `expression` of a refusal. */
export interface OperationPlace {
  /** The message's start: the patch's kind and the operation (`JSON Patch (operation 3)`). */
  what: string;
  /** The operation in the body (`Parameters.parameter[3]`), when the patch has such a path. */
  expression?: string;
}

/**
 * The size of a resource as a patch grows it: the resource's own, then each value an operation
 * adds (replaced and removed values are not taken off, so this is an upper bound of the result's).
 */
export class PatchedSize {
  readonly #max: number;
  #size: number;

  constructor(resource: unknown, limits: PatchLimits) {
    this.#max = limits.maxResourceSize;
    this.#size = jsonSizeUpTo(resource, this.#max);
  }

  /**
   * Counts `value`, which the operation at `place` is about to write under a key of `keyLength`
   * characters; throws a 413 (`too-costly`) when the resource would then be over the limit, before
   * anything is written. A value that is undefined (an operation that fails on its own) counts nothing.
   */
  add(value: unknown, keyLength: number, place: OperationPlace): void {
    if (value === undefined) return;
    const room = this.#max - this.#size;
    const grown = jsonSizeUpTo(value, room) + keyLength + 4;
    if (grown > room) {
      throw new FhirError(
        413,
        'too-costly',
        `${place.what}: the patched resource would be over ${this.#max} bytes (${OPTION.maxResourceSize})`,
        place.expression === undefined ? {} : { expression: [place.expression] },
      );
    }
    this.#size += grown;
  }
}
