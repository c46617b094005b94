/**
 * `Project/{id}/$new-client`: registers a client application for SMART Backend Services in a
 * project. See docs/project-init.md.
 */
import { randomUUID } from 'node:crypto';
import { isAdminScope } from '../auth/access/admin-scopes.js';
import { MAX_JWKS_SIZE, isFetchableJwksUri } from '../auth/client/client-jwks.js';
import { generateClientSecret, hashClientSecret } from '../auth/client/client-secret.js';
import { isPublicHostname } from '../auth/keys/public-address.js';
import { parseResourceScope } from '../auth/access/scopes.js';
import type { ClientRecord, MembershipRecord, Storage } from '../storage/types.js';
import { invalidParameter, readParameters } from '../http/fhir-parameters.js';
import { parsePublicJwks, type PublicJwks } from './public-jwks.js';

/** The input parameters of `$new-client`. */
export const NEW_CLIENT_PARAMETERS = {
  name: { type: 'string', required: true },
  jwks: { type: 'string' },
  jwksUri: { type: ['uri', 'url', 'string'] },
  scope: { type: 'string' },
  admin: { type: 'boolean' },
  accessTokenLifetime: { type: 'integer' },
  redirectUri: { type: ['uri', 'url', 'string'], repeats: true },
  public: { type: 'boolean' },
} as const;

/** Rules `$new-client` applies, resolved from the router options. */
export interface NewClientRules {
  /** Scope a client gets when `scope` is not given. */
  defaultScope: string;
  /** Bounds of `accessTokenLifetime`, seconds, inclusive. */
  minClientTokenLifetime: number;
  maxClientTokenLifetime: number;
  /** Accept `http:` `jwksUri`s on any host, not only loopback ones. */
  allowHttpJwksUri: boolean;
  /** Accept `jwksUri`s naming a loopback, private or link-local address (or `localhost`). */
  allowPrivateJwksAddresses: boolean;
  /** Accept `$settings` import sources whose URLs name such an address. */
  allowPrivateImportAddresses: boolean;
}

/** What `$new-client` was asked to register. */
export interface NewClientInput {
  name: string;
  jwks?: PublicJwks;
  jwksUri?: string;
  /** Normalised: single spaces, no duplicates. */
  scope: string;
  admin: boolean;
  accessTokenLifetime?: number;
  /** Redirect URIs of the authorization code flow, without duplicates. */
  redirectUris?: string[];
  /** A public client: no secret nor keys. */
  public?: boolean;
}

const MAX_NAME_LENGTH = 256;
const MAX_JWKS_TEXT = MAX_JWKS_SIZE;
const MAX_URI_LENGTH = 2048;
const MAX_SCOPE_LENGTH = 4096;
// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/;
const MAX_REDIRECT_URIS = 20;
// SMART scopes that name no resource: identity, launch context and refresh tokens.
const LAUNCH_SCOPES = new Set([
  'openid',
  'fhirUser',
  'profile',
  'launch',
  'launch/patient',
  'offline_access',
  'online_access',
]);
// A SMART patient scope, v1 or v2, as far as registration checks it (its enforcement parses it again).
const PATIENT_SCOPE = /^patient\/(\*|[A-Z][A-Za-z]{1,63})\.(read|write|\*|c?r?u?d?s?)$/;

/**
 * Checks a space-separated scope string (RFC 6749 §3.3). SMART resource scopes (`system/…`,
 * `user/…`, `patient/…`) must be ones this server can grant (`system/Observation.rs`,
 * `patient/*.read`); v2 scopes with a query are refused since they are never granted, and so are the
 * administration scopes (`project:admin` comes with `admin: true`). Returns the normalised scope, or
 * the problem.
 */
export function checkClientScope(
  scope: string,
): { ok: true; scope: string } | { ok: false; problem: string } {
  if (scope.length > MAX_SCOPE_LENGTH)
    return { ok: false, problem: `is longer than ${MAX_SCOPE_LENGTH} characters` };
  const tokens = scope.trim().split(/ +/);
  for (const token of tokens) {
    if (!SCOPE_TOKEN.test(token)) return { ok: false, problem: `holds an invalid scope token '${token}'` };
    if (isAdminScope(token)) {
      return { ok: false, problem: `holds '${token}', which only an admin role gives (use admin: true)` };
    }
    if (LAUNCH_SCOPES.has(token) || (PATIENT_SCOPE.test(token) && !token.endsWith('.'))) continue;
    if (/^(system|user|patient)\//.test(token) && !parseResourceScope(token)) {
      return { ok: false, problem: `holds a resource scope this server cannot grant: '${token}'` };
    }
  }
  return { ok: true, scope: [...new Set(tokens)].join(' ') };
}

/** Whether `uri` is an acceptable `jwksUri`: https, or http on a loopback host (or any host when allowed). */
export function isAcceptableJwksUri(uri: string, allowHttp: boolean): boolean {
  if (uri.length > MAX_URI_LENGTH || /\s/.test(uri) || uri.includes('#')) return false;
  return isFetchableJwksUri(uri, allowHttp);
}

/**
 * Whether `uri` is an acceptable redirect URI (RFC 6749 §3.1.2, OAuth 2.0 Security BCP §2.1):
 * absolute https, or http on localhost / 127.0.0.1 / [::1] only; no fragment, no credentials.
 */
export function isAcceptableRedirectUri(uri: string): boolean {
  return isAcceptableJwksUri(uri, false);
}

/** Reads and checks the `$new-client` `Parameters` body; problems are 400 `FhirError`s with an `expression`. */
export function parseNewClientParameters(body: unknown, rules: NewClientRules): NewClientInput {
  const read = readParameters(body, NEW_CLIENT_PARAMETERS);
  const name = read.name.value.trim();
  if (name.length > MAX_NAME_LENGTH) {
    throw invalidParameter(
      read.name.expression,
      `The client name is longer than ${MAX_NAME_LENGTH} characters`,
    );
  }
  const input: NewClientInput = { name, scope: rules.defaultScope, admin: read.admin?.value ?? false };
  if (read.jwks && read.jwksUri) {
    const later = read.jwks.index > read.jwksUri.index ? read.jwks : read.jwksUri;
    throw invalidParameter(
      `Parameters.parameter[${later.index}]`,
      "Give either 'jwks' or 'jwksUri', not both",
    );
  }
  if (read.jwks) {
    if (read.jwks.value.length > MAX_JWKS_TEXT) {
      throw invalidParameter(read.jwks.expression, `'jwks' is longer than ${MAX_JWKS_TEXT} characters`);
    }
    const parsed = parsePublicJwks(read.jwks.value);
    if (!parsed.ok) throw invalidParameter(read.jwks.expression, `'jwks' ${parsed.problem}`);
    input.jwks = parsed.jwks;
  }
  if (read.jwksUri) {
    if (!isAcceptableJwksUri(read.jwksUri.value, rules.allowHttpJwksUri)) {
      throw invalidParameter(
        read.jwksUri.expression,
        "'jwksUri' must be an https URL (http only on localhost or 127.0.0.1), without credentials or fragment",
      );
    }
    // A name is checked again, after DNS, each time the token endpoint connects.
    if (!rules.allowPrivateJwksAddresses && !isPublicHostname(new URL(read.jwksUri.value).hostname)) {
      throw invalidParameter(
        read.jwksUri.expression,
        "'jwksUri' must not name a loopback, private or link-local address",
      );
    }
    input.jwksUri = read.jwksUri.value;
  }
  if (read.scope) {
    const checked = checkClientScope(read.scope.value);
    if (!checked.ok) throw invalidParameter(read.scope.expression, `'scope' ${checked.problem}`);
    input.scope = checked.scope;
  }
  if (read.accessTokenLifetime) {
    const seconds = read.accessTokenLifetime.value;
    if (seconds < rules.minClientTokenLifetime || seconds > rules.maxClientTokenLifetime) {
      throw invalidParameter(
        read.accessTokenLifetime.expression,
        `'accessTokenLifetime' must be between ${rules.minClientTokenLifetime} and ${rules.maxClientTokenLifetime} seconds`,
      );
    }
    input.accessTokenLifetime = seconds;
  }
  if (read.redirectUri.length > MAX_REDIRECT_URIS) {
    throw invalidParameter(
      read.redirectUri[MAX_REDIRECT_URIS]!.expression,
      `At most ${MAX_REDIRECT_URIS} 'redirectUri'`,
    );
  }
  for (const uri of read.redirectUri) {
    if (!isAcceptableRedirectUri(uri.value)) {
      throw invalidParameter(
        uri.expression,
        "'redirectUri' must be an absolute https URL (http only on localhost or 127.0.0.1), without credentials or fragment",
      );
    }
  }
  if (read.redirectUri.length > 0) input.redirectUris = [...new Set(read.redirectUri.map((u) => u.value))];
  if (read.public?.value) {
    const keyed = read.jwks ?? read.jwksUri;
    if (keyed)
      throw invalidParameter(keyed.expression, "A public client has no keys: drop 'jwks' / 'jwksUri'");
    if (input.admin) throw invalidParameter(read.admin!.expression, 'A public client cannot be an admin');
    if (!input.redirectUris) {
      throw invalidParameter(read.public.expression, "A public client needs at least one 'redirectUri'");
    }
    input.public = true;
  }
  return input;
}

/** A registered client, with its secret in clear (shown once; none for a public client). */
export interface RegisteredClient {
  client: ClientRecord;
  membership: MembershipRecord;
  secret?: string;
}

/**
 * Registers the client in `projectId`: a new random `client_id` and secret (stored hashed) and the
 * client's project membership (with its admin flag), in one transaction.
 */
export async function registerClient(
  storage: Storage,
  projectId: string,
  input: NewClientInput,
): Promise<RegisteredClient> {
  const secret = input.public ? undefined : generateClientSecret();
  const secretHash = secret === undefined ? undefined : await hashClientSecret(secret);
  return storage.transaction(async (tx) => {
    const client = await tx.createClient({
      id: randomUUID(),
      projectId,
      name: input.name,
      ...(secretHash !== undefined ? { secretHash } : {}),
      ...(input.redirectUris ? { redirectUris: input.redirectUris } : {}),
      ...(input.public ? { public: true } : {}),
      ...(input.jwks ? { jwks: input.jwks } : {}),
      ...(input.jwksUri ? { jwksUri: input.jwksUri } : {}),
      scope: input.scope,
      admin: input.admin,
      superAdmin: false,
      ...(input.accessTokenLifetime !== undefined ? { accessTokenLifetime: input.accessTokenLifetime } : {}),
    });
    const membership = await tx.createMembership(projectId, {
      projectId,
      clientId: client.id,
      admin: input.admin,
    });
    return { client, membership, ...(secret !== undefined ? { secret } : {}) };
  });
}
