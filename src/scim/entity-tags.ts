/**
 * SCIM versions as entity tags (RFC 7644 §3.14): a user's version is its ETag (`W/"3"`), and
 * `If-Match` / `If-None-Match` name the versions a request expects.
 */
import { ScimError } from '../http/http-error.js';

/** Parsed `If-Match` / `If-None-Match`: `*`, or the versions listed. */
export type EntityTagCondition = '*' | number[];

/** Parses an entity-tag list (`W/"3", "4"` or `*`); tags that are not our versions never match. */
export function parseEntityTags(header: string | undefined): EntityTagCondition | undefined {
  if (header === undefined || header.trim() === '') return undefined;
  if (header.trim() === '*') return '*';
  const versions: number[] = [];
  for (const match of header.matchAll(/(?:W\/)?"([^"]*)"/g)) {
    const n = Number(match[1]);
    if (Number.isSafeInteger(n)) versions.push(n);
  }
  return versions;
}

export function entityTagMatches(condition: EntityTagCondition, version: number): boolean {
  return condition === '*' || condition.includes(version);
}

/** 412 unless `version` is one `ifMatch` expects (no `If-Match`: any). */
export function checkIfMatch(ifMatch: EntityTagCondition | undefined, version: number): void {
  if (ifMatch && !entityTagMatches(ifMatch, version)) {
    throw new ScimError(412, undefined, 'The resource changed (version mismatch)');
  }
}
