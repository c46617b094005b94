/**
 * Why `value` cannot be a `baseUrl`, or undefined when it can: an absolute `http:` or `https:` URL
 * with a host, and neither credentials, query nor fragment (a path is kept: `https://host/api`).
 * `new URL()` alone is not enough: `localhost:3006` parses, as scheme `localhost:`, and every
 * advertised URL would then be `localhost:3006/oauth2/token`.
 */
export function baseUrlProblem(value: unknown): string | undefined {
  if (typeof value !== 'string') return 'must be a string';
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'must be an absolute http or https URL (https://fhir.example.org)';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return `must be an absolute http or https URL (https://fhir.example.org), not scheme "${url.protocol}"`;
  }
  // (The parser also takes `http:host` and `http:/host`.)
  if (!/^https?:\/\/[^/]/i.test(value) || !url.hostname)
    return 'must start with http:// or https:// and a host';
  if (url.username || url.password) return 'must not carry credentials';
  if (url.search || url.hash || value.includes('?') || value.includes('#')) {
    return 'must not have a query or fragment';
  }
  return undefined;
}
