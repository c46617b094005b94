import { DEFAULT_MAX_JSON_DEPTH, jsonNestingExceeds } from '../../http/json-depth.js';

/**
 * True when the JSON header or payload of a compact JWS/JWT nests objects and arrays deeper than
 * `maxDepth`: such a token is refused as malformed before any JSON in it is parsed or walked. Reads
 * the Base64url segments as they are; anything malformed is left to the JWT library to refuse.
 */
export function jwtNestingExceeds(token: string, maxDepth = DEFAULT_MAX_JSON_DEPTH): boolean {
  const firstDot = token.indexOf('.');
  if (firstDot === -1) return false;
  const secondDot = token.indexOf('.', firstDot + 1);
  const header = token.slice(0, firstDot);
  const payload = token.slice(firstDot + 1, secondDot === -1 ? undefined : secondDot);
  return (
    jsonNestingExceeds(Buffer.from(header, 'base64url'), maxDepth) ||
    jsonNestingExceeds(Buffer.from(payload, 'base64url'), maxDepth)
  );
}
