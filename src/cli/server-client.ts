import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import { importJWK, SignJWT, type JWK } from 'jose';
import { CliError, EXIT, UsageError } from './cli-error.js';

/** How the command authenticates to the server's token endpoint. */
export interface ClientCredentials {
  clientId: string;
  /** `client_secret_basic`. */
  clientSecret?: string;
  /** A private JWK file (as `keys` writes it): `private_key_jwt` (SMART Backend Services). */
  privateKeyFile?: string;
  /** Scopes to ask for; without it the server grants everything the client may have. */
  scope?: string;
}

/** The connection flags shared by the commands that talk to a server. */
export interface ConnectionFlags {
  fhirUrl: string;
  clientId?: string;
  clientSecret?: string;
  privateKey?: string;
  scope?: string;
}

/** Checks the connection flags: a FHIR base URL and exactly one kind of client credential. */
export function connectionOf(flags: ConnectionFlags): { fhirBase: string; credentials: ClientCredentials } {
  let fhirBase: string;
  try {
    fhirBase = new URL(flags.fhirUrl).href.replace(/\/+$/, '');
  } catch {
    throw new UsageError(`--fhir-url must be an absolute URL, got "${flags.fhirUrl}"`);
  }
  if (!flags.clientId) throw new UsageError('--client-id (FPK_CLIENT_ID) is required');
  if (Boolean(flags.clientSecret) === Boolean(flags.privateKey)) {
    throw new UsageError(
      'Give exactly one of --client-secret (FPK_CLIENT_SECRET) and --private-key (FPK_PRIVATE_KEY)',
    );
  }
  return {
    fhirBase,
    credentials: {
      clientId: flags.clientId,
      ...(flags.clientSecret ? { clientSecret: flags.clientSecret } : {}),
      ...(flags.privateKey ? { privateKeyFile: flags.privateKey } : {}),
      ...(flags.scope ? { scope: flags.scope } : {}),
    },
  };
}

interface ErrorBody {
  issue?: { severity?: string; details?: { text?: string }; diagnostics?: string }[];
  error?: string;
  error_description?: string;
  detail?: string;
}

/** The one-line reason a server answer gives: OperationOutcome issues, an OAuth error or SCIM detail. */
export function reasonOf(text: string): string {
  let body: ErrorBody | undefined;
  try {
    body = JSON.parse(text) as ErrorBody;
  } catch {
    return text.trim().slice(0, 200);
  }
  if (body && Array.isArray(body.issue)) {
    const issues = body.issue
      .filter((i) => i.severity === 'error' || i.severity === 'fatal' || body.issue!.length === 1)
      .map((i) => i.details?.text ?? i.diagnostics)
      .filter((t): t is string => typeof t === 'string');
    if (issues.length > 0) return issues.join('; ');
  }
  if (body && typeof body.error === 'string') {
    return body.error_description ? `${body.error}: ${body.error_description}` : body.error;
  }
  if (body && typeof body.detail === 'string') return body.detail;
  return text.trim().slice(0, 200);
}

/** A request that got no answer: the server is down or gone, or the network failed. */
export class UnreachableError extends CliError {
  constructor(url: string, error: unknown) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    super(`Cannot reach ${url}: ${cause?.code ?? cause?.message ?? String(error)}`, EXIT.failure, {
      cause: error,
    });
    this.name = 'UnreachableError';
  }
}

/** `fetch` that turns a network failure into one clear line (an `UnreachableError`). */
export async function fetchOrFail(url: string, init?: RequestInit): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (error) {
    throw new UnreachableError(url, error);
  }
}

/** A failed answer as a `CliError`: `<what>: <status> <reason>`. */
export async function answerError(what: string, res: Response): Promise<CliError> {
  const reason = reasonOf(await res.text().catch(() => ''));
  return new CliError(`${what}: ${res.status} ${reason || res.statusText}`.trim());
}

async function readPrivateKey(
  file: string,
): Promise<{ key: Awaited<ReturnType<typeof importJWK>>; alg: string; kid?: string }> {
  let jwk: JWK;
  try {
    jwk = JSON.parse(await fs.readFile(file, 'utf8')) as JWK;
  } catch (error) {
    throw new CliError(`Cannot read the private key ${file}: ${(error as Error).message}`);
  }
  if (!jwk || typeof jwk !== 'object' || !('d' in jwk)) {
    throw new CliError(`${file} is not a private JWK (as \`fhir-platform-kit keys\` writes)`);
  }
  const alg = jwk.alg ?? (jwk.kty === 'EC' ? 'ES384' : 'RS384');
  try {
    return { key: await importJWK(jwk, alg), alg, ...(jwk.kid ? { kid: jwk.kid } : {}) };
  } catch (error) {
    throw new CliError(`Cannot use the private key ${file}: ${(error as Error).message}`);
  }
}

/**
 * A client of one server: finds the token endpoint in `.well-known/smart-configuration` under the
 * FHIR base, gets (and renews) an access token, and sends requests with it.
 */
export class ServerClient {
  readonly fhirBase: string;
  readonly #credentials: ClientCredentials;
  #tokenEndpoint: string | undefined;
  #token: { value: string; expiresAt: number } | undefined;

  constructor(fhirBase: string, credentials: ClientCredentials) {
    this.fhirBase = fhirBase;
    this.#credentials = credentials;
  }

  async tokenEndpoint(): Promise<string> {
    if (this.#tokenEndpoint) return this.#tokenEndpoint;
    const url = `${this.fhirBase}/.well-known/smart-configuration`;
    const res = await fetchOrFail(url, { headers: { Accept: 'application/json' } });
    if (!res.ok) throw await answerError(`SMART configuration ${url}`, res);
    const config = (await res.json().catch(() => ({}))) as { token_endpoint?: unknown };
    if (typeof config.token_endpoint !== 'string') {
      throw new CliError(`${url} does not name a token_endpoint`);
    }
    this.#tokenEndpoint = config.token_endpoint;
    return config.token_endpoint;
  }

  /** A valid access token, renewed when less than 30 s of it remain. */
  async token(): Promise<string> {
    if (this.#token && this.#token.expiresAt - Date.now() > 30_000) return this.#token.value;
    const endpoint = await this.tokenEndpoint();
    const { clientId, clientSecret, privateKeyFile, scope } = this.#credentials;
    const form = new URLSearchParams({ grant_type: 'client_credentials' });
    if (scope) form.set('scope', scope);
    const headers: Record<string, string> = {
      'Content-Type': 'application/x-www-form-urlencoded',
      Accept: 'application/json',
    };
    if (privateKeyFile) {
      // SMART Backend Services "Authenticating to the token endpoint": iss = sub = client id,
      // aud = the token endpoint, a fresh jti, at most 5 minutes of life.
      const { key, alg, kid } = await readPrivateKey(privateKeyFile);
      const assertion = await new SignJWT({})
        .setProtectedHeader({ alg, typ: 'JWT', ...(kid ? { kid } : {}) })
        .setIssuer(clientId)
        .setSubject(clientId)
        .setAudience(endpoint)
        .setJti(randomUUID())
        .setIssuedAt()
        .setExpirationTime('5m')
        .sign(key);
      form.set('client_assertion_type', 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer');
      form.set('client_assertion', assertion);
    } else {
      const encode = (v: string) => encodeURIComponent(v);
      headers.Authorization = `Basic ${Buffer.from(`${encode(clientId)}:${encode(clientSecret ?? '')}`).toString('base64')}`;
    }
    const res = await fetchOrFail(endpoint, { method: 'POST', headers, body: form });
    if (!res.ok) throw await answerError(`Token request for client ${clientId} refused`, res);
    const body = (await res.json()) as { access_token?: unknown; expires_in?: unknown };
    if (typeof body.access_token !== 'string')
      throw new CliError('The token endpoint answered no access_token');
    const lifetime = typeof body.expires_in === 'number' ? body.expires_in : 300;
    this.#token = { value: body.access_token, expiresAt: Date.now() + lifetime * 1000 };
    return body.access_token;
  }

  /** A request with the access token; `url` is absolute or relative to the FHIR base. */
  async request(
    url: string,
    init: RequestInit & { headers?: Record<string, string> } = {},
  ): Promise<Response> {
    const absolute = /^https?:\/\//i.test(url) ? url : `${this.fhirBase}${url}`;
    return fetchOrFail(absolute, {
      ...init,
      headers: { ...init.headers, Authorization: `Bearer ${await this.token()}` },
    });
  }

  /** POSTs a FHIR `Parameters` resource to an operation and answers the JSON of a 2xx answer. */
  async operation(what: string, url: string, parameters: unknown): Promise<Record<string, unknown>> {
    const res = await this.request(url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/fhir+json', Accept: 'application/fhir+json' },
      body: JSON.stringify(parameters),
    });
    if (!res.ok) throw await answerError(what, res);
    return (await res.json()) as Record<string, unknown>;
  }
}
