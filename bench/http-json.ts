/** Minimal HTTP helpers for the benchmark client (global `fetch`, 127.0.0.1 only). */

export interface JsonAnswer {
  status: number;
  headers: Headers;
  body: unknown;
}

/** Sends a request and parses a JSON answer (body `undefined` when empty). */
export async function fetchJson(url: string, init: RequestInit = {}): Promise<JsonAnswer> {
  const res = await fetch(url, init);
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as unknown) : undefined };
}

/** Like {@link fetchJson}, but throws unless the status is `expected`. */
export async function expectJson(expected: number, url: string, init: RequestInit = {}): Promise<JsonAnswer> {
  const answer = await fetchJson(url, init);
  if (answer.status !== expected) {
    throw new Error(
      `${init.method ?? 'GET'} ${url}: expected ${expected}, got ${answer.status} ${JSON.stringify(answer.body).slice(0, 500)}`,
    );
  }
  return answer;
}

export function bearer(token: string, extra: Record<string, string> = {}): Record<string, string> {
  return { authorization: `Bearer ${token}`, ...extra };
}

/** An OAuth client-credentials token with `client_secret_basic` (RFC 6749 §2.3.1). */
export async function clientToken(origin: string, clientId: string, secret: string): Promise<string> {
  const basic = Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(secret)}`).toString(
    'base64',
  );
  const answer = await expectJson(200, `${origin}/oauth2/token`, {
    method: 'POST',
    headers: { authorization: `Basic ${basic}`, 'content-type': 'application/x-www-form-urlencoded' },
    body: 'grant_type=client_credentials',
  });
  return (answer.body as { access_token: string }).access_token;
}
