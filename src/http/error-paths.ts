import { checkOptionKeys, type OptionKeys } from '../common/option-keys.js';
import { optionError } from '../common/options.js';

/**
 * Path prefixes whose errors are answered in another protocol than FHIR where no router of theirs
 * answers: a request Node's parser refuses (`protectServer`), one no route takes
 * (`notFoundHandler`), an error no router caught (`fallbackErrorHandler`). A prefix covers itself
 * and the paths below it (`/scim/v2`, `/scim/v2/Users`; not `/scim/v2x`), in any letter case as
 * Express routes them. Given, it replaces the defaults: list every prefix, under the path the host
 * mounts the platform at (`fhirPlatform(…).errorPaths` lists the platform's own).
 */
export interface ErrorPaths {
  /**
   * Answered as SCIM Error JSON (RFC 7644 §3.12, `application/scim+json`).
   * @default ['/scim/v2']
   */
  scim?: string[];
  /**
   * Answered as OAuth 2.0 error JSON (RFC 6749 §5.2, `application/json`, `Cache-Control: no-store`).
   * @default ['/oauth2/token', '/oauth2/jwks']
   */
  oauth?: string[];
}

/** The protocol an error answer is written in. */
export type ErrorFormat = 'fhir' | 'scim' | 'oauth';

/** The format of the answer to a request target (origin or absolute form); FHIR when unknown. */
export type ErrorFormatOf = (target: string | undefined) => ErrorFormat;

/** `fhirPlatform`'s default mount paths. */
export const DEFAULT_ERROR_PATHS: Required<ErrorPaths> = {
  scim: ['/scim/v2'],
  oauth: ['/oauth2/token', '/oauth2/jwks'],
};

const ERROR_PATH_KEYS: OptionKeys<ErrorPaths> = { scim: true, oauth: true };

function prefixes(owner: string, name: keyof ErrorPaths, value: unknown): string[] {
  if (value === undefined) return DEFAULT_ERROR_PATHS[name];
  const option = `errorPaths.${name}`;
  if (!Array.isArray(value)) optionError(owner, option, `${option} must be an array of paths`);
  for (const path of value as unknown[]) {
    if (typeof path !== 'string' || !path.startsWith('/') || path.length < 2 || path.endsWith('/')) {
      optionError(
        owner,
        option,
        `${option}: each path must start with "/" and not end with "/" (got ${JSON.stringify(path)})`,
      );
    }
  }
  return value as string[];
}

/** The path of a request target, lower-cased: `/a/b` of `/A/b?x`, of `http://host/A/b`. */
function pathOf(target: string): string {
  const absolute = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i.exec(target);
  const rest = absolute ? target.slice(absolute[0].length) : target;
  const end = rest.search(/[?#]/);
  return (end === -1 ? rest : rest.slice(0, end)).toLowerCase();
}

/**
 * Checks `errorPaths` (of `owner`'s options) and answers the format of a request target: SCIM or
 * OAuth under one of their prefixes, else FHIR.
 * @throws InvalidOptionError on an unknown key or a path that does not start with "/" or ends with "/".
 */
export function errorFormatOf(owner: string, errorPaths: ErrorPaths | undefined): ErrorFormatOf {
  if (errorPaths !== undefined && (typeof errorPaths !== 'object' || errorPaths === null)) {
    optionError(owner, 'errorPaths', 'errorPaths must be an object ({ scim, oauth })');
  }
  checkOptionKeys(owner, errorPaths, ERROR_PATH_KEYS, 'errorPaths.');
  // Longest first: `/api/token` (OAuth) wins over `/api` (SCIM) for `/api/token`.
  const formats: [string, ErrorFormat][] = [
    ...prefixes(owner, 'scim', errorPaths?.scim).map((p): [string, ErrorFormat] => [p.toLowerCase(), 'scim']),
    ...prefixes(owner, 'oauth', errorPaths?.oauth).map((p): [string, ErrorFormat] => [
      p.toLowerCase(),
      'oauth',
    ]),
  ].sort((a, b) => b[0].length - a[0].length);
  return (target) => {
    if (target === undefined) return 'fhir';
    const path = pathOf(target);
    for (const [prefix, format] of formats) {
      if (path === prefix || path.startsWith(`${prefix}/`)) return format;
    }
    return 'fhir';
  };
}
