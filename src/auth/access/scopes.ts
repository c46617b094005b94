/**
 * SMART scopes, v1 (`system/Observation.read`, `patient/*.write`, `user/*.*`) and v2
 * (`system/Patient.cruds`, `patient/*.rs`), in the three contexts of SMART App Launch 2.x
 * ("Scopes and Launch Context"): `system/` (SMART Backend Services), `user/` (what the signed-in
 * user may see) and `patient/` (the launch context patient's compartment). A v2 scope with a
 * `?param=value` restriction is not parsed: this server does not enforce such restrictions, so it
 * never grants one (a client registered for it verbatim still gets no access from it).
 */

/** Interactions a scope can permit: create, read, update, delete, search. */
export type ScopeAction = 'c' | 'r' | 'u' | 'd' | 's';

const ALL_ACTIONS: readonly ScopeAction[] = ['c', 'r', 'u', 'd', 's'];

/** The context of a resource scope. */
export type ScopeContext = 'system' | 'user' | 'patient';

export interface ResourceScope {
  /** `system`, `user` or `patient` (what each covers: `canAccess`, `dataAccess`). */
  context: ScopeContext;
  /** A FHIR resource type or `*`. */
  resourceType: string;
  actions: ReadonlySet<ScopeAction>;
  /** The scope as written. */
  text: string;
}

const SCOPE_PATTERN = /^(system|user|patient)\/(\*|[A-Z][A-Za-z]{1,63})\.(read|write|\*|c?r?u?d?s?)$/;

/**
 * Parses one resource scope; `undefined` for anything else (other scopes such as `openid` or
 * `launch/patient`, and v2 scopes with a `?` query restriction, which this server does not enforce and
 * so never grants).
 */
export function parseResourceScope(text: string): ResourceScope | undefined {
  // Every request checks its token's scopes (a transaction once per entry): the few distinct scope
  // strings in use are parsed once. The results are shared: frozen, their `actions` read-only.
  // Longer than any resource scope (a caller's `scope` parameter is not worth keeping).
  if (text.length > 80) return undefined;
  const known = parsedScopes.get(text);
  if (known !== undefined || parsedScopes.has(text)) return known;
  const scope = parseScope(text);
  if (parsedScopes.size >= MAX_PARSED_SCOPES) parsedScopes.clear();
  parsedScopes.set(text, scope);
  return scope;
}

/** Scope strings parsed so far (emptied when it reaches {@link MAX_PARSED_SCOPES}). */
const parsedScopes = new Map<string, ResourceScope | undefined>();
const MAX_PARSED_SCOPES = 1024;

function parseScope(text: string): ResourceScope | undefined {
  const match = SCOPE_PATTERN.exec(text);
  if (!match) return undefined;
  const [, context, resourceType, permission] = match as unknown as [string, ScopeContext, string, string];
  if (permission === '') return undefined;
  let actions: ScopeAction[];
  if (permission === 'read') actions = ['r', 's'];
  else if (permission === 'write') actions = ['c', 'u', 'd'];
  else if (permission === '*') actions = [...ALL_ACTIONS];
  else actions = [...permission] as ScopeAction[];
  return Object.freeze({ context, resourceType, actions: new Set(actions), text });
}

/** Splits a space-separated scope string. */
export function splitScopes(scope: string | undefined): string[] {
  return (scope ?? '').split(/\s+/).filter((s) => s.length > 0);
}

/** The contexts whose scopes count for a client (`patient/` scopes need a launch patient). */
const CLIENT_CONTEXTS: readonly ScopeContext[] = ['system', 'user'];

/**
 * True when one of `scopes` of one of `contexts` permits `action` on `resourceType`. The contexts
 * default to `system` and `user` (what a client token's scopes have always covered); `patient/`
 * scopes count only where the caller names them (a user principal with a launch patient).
 */
export function scopesAllow(
  scopes: readonly string[],
  resourceType: string,
  action: ScopeAction,
  contexts: readonly ScopeContext[] = CLIENT_CONTEXTS,
): boolean {
  for (const text of scopes) {
    const scope = parseResourceScope(text);
    if (
      scope &&
      contexts.includes(scope.context) &&
      (scope.resourceType === '*' || scope.resourceType === resourceType) &&
      scope.actions.has(action)
    ) {
      return true;
    }
  }
  return false;
}

/** Whether `have` permits everything `want` does: same context, its type or `*`, every action of `want`. */
function covers(have: ResourceScope, want: ResourceScope): boolean {
  return (
    have.context === want.context &&
    (have.resourceType === '*' || have.resourceType === want.resourceType) &&
    [...want.actions].every((a) => have.actions.has(a))
  );
}

/**
 * Whether `granted` implies `scope`, in v1 or v2 syntax alike: a resource scope is implied by a granted
 * one of the same context (`user/` and `patient/` are different contexts) whose type is the same or
 * `*` and whose actions include all of its own (`patient/*.read` implies `patient/Observation.rs`,
 * `patient/*.rs` implies `patient/Observation.r`, but not `patient/Observation.cruds`). Any other scope
 * (`openid`, `fhirUser`, `offline_access`, `online_access`, `launch/patient`, a v2 scope with a `?`
 * restriction) is implied only when granted as written. What a refresh may ask for (SMART App Launch
 * 2.x "Refresh access token": a subset of the scopes granted in the original launch; RFC 6749 §6).
 */
export function scopeImplied(granted: readonly string[], scope: string): boolean {
  const want = parseResourceScope(scope);
  if (!want) return granted.includes(scope);
  return granted.some((text) => {
    const have = parseResourceScope(text);
    return have !== undefined && covers(have, want);
  });
}

function formatScope(context: string, resourceType: string, actions: ReadonlySet<ScopeAction>): string {
  return `${context}/${resourceType}.${ALL_ACTIONS.filter((a) => actions.has(a)).join('')}`;
}

/**
 * Granted = requested ∩ allowed (SMART: the server may grant fewer scopes than requested). A requested
 * resource scope wholly covered by one allowed scope is granted as written; otherwise it is narrowed to
 * what each overlapping allowed scope permits, in v2 syntax. Non-resource scopes are granted only when
 * allowed verbatim.
 */
export function intersectScopes(requested: readonly string[], allowed: readonly string[]): string[] {
  const granted = new Set<string>();
  const allowedParsed = allowed.map(parseResourceScope);
  for (const text of requested) {
    const want = parseResourceScope(text);
    if (!want) {
      if (allowed.includes(text)) granted.add(text);
      continue;
    }
    if (allowedParsed.some((have) => have && covers(have, want))) {
      granted.add(text);
      continue;
    }
    for (const have of allowedParsed) {
      if (!have || have.context !== want.context) continue;
      let resourceType: string;
      if (want.resourceType === '*') resourceType = have.resourceType;
      else if (have.resourceType === '*' || have.resourceType === want.resourceType)
        resourceType = want.resourceType;
      else continue;
      const actions = new Set([...want.actions].filter((a) => have.actions.has(a)));
      if (actions.size > 0) granted.add(formatScope(want.context, resourceType, actions));
    }
  }
  return [...granted];
}
