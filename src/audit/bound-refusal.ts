import type { AuditRecord, TokenEvent } from './events.js';

/** The first `max` UTF-16 units of `text`, never half of a surrogate pair. */
export function cutText(text: string, max: number): string {
  if (text.length <= max) return text;
  const end = /[\uD800-\uDBFF]/.test(text.charAt(max - 1)) ? max - 1 : max;
  return text.slice(0, end);
}

/** Whole scopes while their joined length fits in `max` (at least the first one, cut). */
function cutScopes(scopes: string[], max: number): string[] {
  const kept: string[] = [];
  let length = -1;
  for (const scope of scopes) {
    if (length + 1 + scope.length > max) break;
    kept.push(scope);
    length += 1 + scope.length;
  }
  return kept.length > 0 || scopes.length === 0 ? kept : [cutText(scopes[0]!, max)];
}

/**
 * `record` with the request text a refusal carries cut to `max` characters: the path and query
 * of a refused request, the scope and the client id a refused token request claimed. What was cut
 * keeps its full length (`pathLength`, `scopeLength`); a cut client id ends with `…`. Anything
 * else is answered as it is. A caller that no one authenticated chooses that text, up to the
 * size of a request line or a form body: without the cut, one event could be 64 KB.
 */
export function boundRefusal<R extends AuditRecord>(record: R, max: number): R {
  if (record.kind === 'refused') {
    if (record.path.length <= max) return record;
    return { ...record, path: cutText(record.path, max), pathLength: record.path.length };
  }
  if (record.kind !== 'token' || record.result !== 'refused') return record;
  let bounded: TokenEvent = record;
  const joined = record.scopes?.join(' ') ?? '';
  if (record.scopes !== undefined && joined.length > max) {
    bounded = { ...bounded, scopes: cutScopes(record.scopes, max), scopeLength: joined.length };
  }
  const id = record.actor.id;
  if (record.actor.kind === 'anonymous' && id !== undefined && id.length > max) {
    bounded = { ...bounded, actor: { ...record.actor, id: `${cutText(id, max)}…` } };
  }
  return bounded as R;
}
