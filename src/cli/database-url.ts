/**
 * What `DATABASE_URL`, `DATABASE_READ_REPLICAS` and `rotate-super-admin-secret --database-url`
 * take: the connection strings node-postgres reads (pg-connection-string) that name a PostgreSQL
 * server. pg itself reads any text: a bare word becomes a host named `base` and a `mysql://` URL
 * a PostgreSQL server, so a wrong value would only fail later, with a confusing network error.
 */
export const CONNECTION_STRING_FORMS =
  'a PostgreSQL connection string: postgres://user:password@host:5432/database (or postgresql://), or a Unix socket as socket:/var/run/postgresql?db=database';

/** Matches a URL scheme (`postgres:`), as RFC 3986 §3.1 spells one. */
const SCHEME = /^([a-z][a-z0-9+.-]*):/i;

/**
 * Why `text` is not a connection string `serve` can use, as a clause (`has the scheme mysql:`)
 * that follows the text in a message, or undefined when it is one:
 * `postgres://` or `postgresql://` URLs (libpq's two schemes; an empty host, as in
 * `postgres://user@/db?host=/var/run/postgresql`, is pg's socket form), `socket:` URLs with a
 * path, and a socket directory's absolute path (`/var/run/postgresql`).
 */
export function connectionStringProblem(text: string): string | undefined {
  if (text.startsWith('/')) return undefined;
  const scheme = SCHEME.exec(text)?.[1]?.toLowerCase();
  if (scheme === undefined) return 'is not a URL';
  if (scheme === 'socket') {
    return parses(text) && /^socket:(\/\/[^/]*)?\/[^/]/i.test(text) ? undefined : 'has no path after socket:';
  }
  if (scheme !== 'postgres' && scheme !== 'postgresql') return `has the scheme ${scheme}:, not postgres:`;
  if (!/^[a-z]+:\/\//i.test(text)) return `does not start with ${scheme}://`;
  return parses(text) ? undefined : 'is not a valid URL';
}

/** Whether pg can read `text` as a URL (it gives an empty host a placeholder, so do we). */
function parses(text: string): boolean {
  return URL.canParse(text) || URL.canParse(text.replace('@/', '@placeholder/'));
}

/** `text` as an error message may quote it: a password in it replaced by `***`. */
export function withoutPassword(text: string): string {
  return text
    .replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/?#@]*:)[^/?#]*@/i, '$1***@')
    .replace(/([?&]password=)[^&#]*/gi, '$1***');
}
