import jsonpatch from 'fast-json-patch';
import { FhirError } from '../http/http-error.js';
import type { FhirResource } from '../storage/types.js';

/** Errors of a patch document that is malformed (400); every other failure to apply is a 422. */
const MALFORMED = new Set([
  'SEQUENCE_NOT_AN_ARRAY',
  'OPERATION_NOT_AN_OBJECT',
  'OPERATION_OP_INVALID',
  'OPERATION_PATH_INVALID',
  'OPERATION_FROM_REQUIRED',
  'OPERATION_VALUE_REQUIRED',
  'OPERATION_VALUE_CANNOT_CONTAIN_UNDEFINED',
]);

/**
 * `resource` with the JSON Patch `operations` applied (a copy; `resource` is left as it was), by
 * `fast-json-patch`, each operation validated first. A document that is not an array of RFC 6902
 * operations is a 400; one that cannot be applied (a path that does not resolve, an index out of
 * range, a failed `test`) a 422; either way nothing is applied. Writes to `__proto__`,
 * `constructor` or `prototype` are refused (400).
 * @see https://datatracker.ietf.org/doc/html/rfc6902
 */
export function applyJsonPatch(resource: FhirResource, operations: unknown): unknown {
  if (!Array.isArray(operations)) {
    throw new FhirError(400, 'invalid', 'A JSON Patch document must be an array of operations');
  }
  try {
    return jsonpatch.applyPatch(structuredClone(resource), operations as jsonpatch.Operation[], true, true)
      .newDocument;
  } catch (error) {
    if (error instanceof jsonpatch.JsonPatchError) {
      const at = error.index === undefined ? '' : ` (operation ${error.index})`;
      const status = MALFORMED.has(error.name) ? 400 : 422;
      throw new FhirError(status, 'invalid', `JSON Patch${at}: ${error.message.split('\n')[0]}`, {
        cause: error,
      });
    }
    // The library's refusal to touch `__proto__` / `constructor/prototype` is a TypeError.
    if (error instanceof TypeError) {
      throw new FhirError(400, 'invalid', 'JSON Patch: the path is not allowed', { cause: error });
    }
    throw error;
  }
}
