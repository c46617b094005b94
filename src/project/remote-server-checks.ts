/**
 * Checks of the settings that name another server the platform signs in to as a client (a
 * project's identity provider, the sources `$import` pulls from): its URLs, and the private key
 * that signs the platform's client assertions there.
 */
import { invalidParameter, type ParameterValue } from '../http/fhir-parameters.js';

/** Hosts on which `http:` is accepted: a server on this machine (a test server). */
const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

/** What a remote URL may hold besides its origin and path. */
export interface RemoteUrlRules {
  /**
   * A query is allowed (a token endpoint may have one; a base URL may not).
   * @default false
   */
  query?: boolean;
}

/**
 * Why `text` cannot be the URL of a remote server, or undefined when it can: absolute, `https:`
 * (`http:` only on `localhost`, `127.0.0.1` or `[::1]`), no user name or password, no fragment,
 * and no query unless `rules.query`.
 */
export function remoteUrlProblem(text: string, rules: RemoteUrlRules = {}): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'must be an absolute URL';
  }
  if (url.username || url.password) return 'must hold no user name or password';
  if (url.hash || text.includes('#')) return 'must have no fragment';
  if (!rules.query && (url.search || text.includes('?'))) return 'must have no query';
  if (url.protocol === 'https:') return undefined;
  const local = LOOPBACK_HOSTS.has(url.hostname);
  return url.protocol === 'http:' && local ? undefined : 'must be an https URL (http only on localhost)';
}

/**
 * A private JWK (RSA, EC or OKP, with its private part `d`) from the JSON text of the parameter
 * `name`; 400 at the value otherwise.
 */
export function readPrivateJwk(item: ParameterValue<string>, name: string): Record<string, unknown> {
  let jwk: unknown;
  try {
    jwk = JSON.parse(item.value);
  } catch {
    throw invalidParameter(item.expression, `'${name}' must be a private JWK as JSON text`);
  }
  const key = jwk as Record<string, unknown> | null;
  if (
    typeof key !== 'object' ||
    key === null ||
    Array.isArray(key) ||
    !['RSA', 'EC', 'OKP'].includes(String(key.kty)) ||
    typeof key.d !== 'string'
  ) {
    throw invalidParameter(item.expression, `'${name}' must be a private RSA, EC or OKP JWK (with 'd')`);
  }
  return key;
}
