/** What a `baseUrl` must be, as the error messages of the library and of `serve` say it. */
export const BASE_URL_FORM =
  'an absolute http or https URL such as https://fhir.example.org (a path is kept; no credentials, query or fragment)';

/**
 * Why `value` cannot be a `baseUrl`, as a clause (`has the scheme "ftp:"`) that follows the value
 * in a message, or undefined when it can: an absolute `http:` or `https:` URL with a host, and
 * neither credentials, query nor fragment (a path is kept: `https://host/api`).
 * `new URL()` alone is not enough: `localhost:3006` parses, as scheme `localhost:`, and every
 * advertised URL would then be `localhost:3006/oauth2/token`.
 */
export function baseUrlProblem(value: unknown): string | undefined {
  if (typeof value !== 'string') return 'is not a string';
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'is not an absolute URL';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `has the scheme "${url.protocol}"`;
  // (The parser also takes `http:host` and `http:/host`.)
  if (!/^https?:\/\/[^/]/i.test(value) || !url.hostname) return 'has no host after http:// or https://';
  if (url.username || url.password) return 'carries credentials';
  if (url.search || url.hash || value.includes('?') || value.includes('#')) {
    return 'has a query or fragment';
  }
  return undefined;
}
