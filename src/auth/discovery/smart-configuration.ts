import { Router, type Request, type RequestHandler } from 'express';
import { CLIENT_ASSERTION_ALGORITHMS } from '../client/client-assertion.js';
import { CLIENT_AUTH_METHODS, type ClientAuthMethod } from '../client/client-authentication.js';
import { defaultIssuer } from '../token/issuer.js';

/** Scopes advertised by default: SMART v1 and v2 system scopes. */
export const DEFAULT_SCOPES_SUPPORTED: readonly string[] = [
  'system/*.read',
  'system/*.write',
  'system/*.*',
  'system/*.rs',
  'system/*.cud',
  'system/*.cruds',
];

/**
 * Capabilities of the authorization code flow (SMART App Launch 2.x "Capabilities") this server
 * implements once an authorization endpoint is mounted.
 */
export const LAUNCH_CAPABILITIES: readonly string[] = [
  'launch-standalone',
  'client-public',
  'context-standalone-patient',
  'permission-patient',
  'permission-user',
  'permission-offline',
  'permission-online',
  'sso-openid-connect',
];

/** Scopes advertised on top of the system ones once an authorization endpoint is mounted. */
export const LAUNCH_SCOPES: readonly string[] = [
  'openid',
  'fhirUser',
  'launch/patient',
  'offline_access',
  'online_access',
  'patient/*.rs',
  'patient/*.read',
  'user/*.rs',
  'user/*.read',
  'user/*.cruds',
];

/** Options of `smartConfigurationHandler`. */
export interface SmartConfigurationOptions {
  /**
   * Public origin used to make `tokenEndpoint` absolute.
   * @default undefined (the request's origin)
   */
  baseUrl?: string;
  /**
   * The token endpoint, absolute or a path on the origin.
   * @default '/oauth2/token'
   */
  tokenEndpoint?: string;
  /**
   * The server's JWKS (for access tokens), absolute or a path on the origin; omitted when unset.
   * @default undefined
   */
  jwksEndpoint?: string;
  /**
   * Resolve relative `tokenEndpoint` and `jwksEndpoint` paths under the mount path of the router
   * this handler is on (`req.baseUrl`) rather than on the bare origin: set it when the handler and
   * the token router are mounted by one parent router that the host may mount under a prefix
   * (`fhirPlatform` does).
   * @default false
   */
  relativeToMount?: boolean;
  /**
   * `issuer`; omitted when unset (SMART requires it only with `sso-openid-connect`).
   * @default undefined
   */
  issuer?: string | ((req: Request) => string);
  /**
   * Client authentication methods advertised (match the token router's `authMethods`).
   * @default ['private_key_jwt', 'client_secret_basic', 'client_secret_post']
   */
  authMethods?: ClientAuthMethod[];
  /**
   * Client assertion algorithms advertised (match the token router's `assertionAlgorithms`).
   * @default ['RS256', 'RS384', 'RS512', 'ES256', 'ES384', 'ES512']
   */
  assertionAlgorithms?: string[];
  /**
   * The authorization endpoint (SMART App Launch), absolute or a path on the origin: when set, the
   * document advertises the authorization code flow (`authorization_code` and `refresh_token`
   * grants, PKCE S256, public clients, the launch and permission capabilities, OpenID Connect).
   * @default undefined (SMART Backend Services only)
   */
  authorizationEndpoint?: string;
  /**
   * The token revocation endpoint (RFC 7009), absolute or a path on the origin; omitted when unset.
   * @default undefined
   */
  revocationEndpoint?: string;
  /**
   * The token introspection endpoint (RFC 7662), absolute or a path on the origin; omitted when unset.
   * @default undefined
   */
  introspectionEndpoint?: string;
  /**
   * `scopes_supported`.
   * @default ['system/*.read', 'system/*.write', 'system/*.*', 'system/*.rs', 'system/*.cud', 'system/*.cruds']
   */
  scopesSupported?: string[];
}

function resolve(req: Request, options: SmartConfigurationOptions, target: string): string {
  if (/^https?:\/\//i.test(target)) return target;
  const prefix = options.relativeToMount ? req.baseUrl : '';
  return `${defaultIssuer(req, options.baseUrl)}${prefix}${target.startsWith('/') ? '' : '/'}${target}`;
}

/**
 * The SMART configuration document (SMART App Launch 2.x "Conformance",
 * `/.well-known/smart-configuration`) for a Backend Services server. Mount it with
 * `app.get('<fhir base>/.well-known/smart-configuration', handler)`.
 */
export function smartConfiguration(
  req: Request,
  options: SmartConfigurationOptions = {},
): Record<string, unknown> {
  const methods = options.authMethods ?? [...CLIENT_AUTH_METHODS];
  const capabilities: string[] = [];
  if (methods.includes('private_key_jwt')) capabilities.push('client-confidential-asymmetric');
  if (methods.includes('client_secret_basic') || methods.includes('client_secret_post')) {
    capabilities.push('client-confidential-symmetric');
  }
  capabilities.push('permission-v1', 'permission-v2');
  const launch = options.authorizationEndpoint !== undefined;
  if (launch) capabilities.push(...LAUNCH_CAPABILITIES);
  const at = (target: string | undefined) =>
    target === undefined ? undefined : resolve(req, options, target);
  const scopes = options.scopesSupported ?? [...DEFAULT_SCOPES_SUPPORTED, ...(launch ? LAUNCH_SCOPES : [])];
  return {
    ...(options.issuer
      ? { issuer: typeof options.issuer === 'function' ? options.issuer(req) : options.issuer }
      : {}),
    ...(options.jwksEndpoint ? { jwks_uri: resolve(req, options, options.jwksEndpoint) } : {}),
    ...(launch ? { authorization_endpoint: at(options.authorizationEndpoint) } : {}),
    token_endpoint: resolve(req, options, options.tokenEndpoint ?? '/oauth2/token'),
    ...(options.revocationEndpoint ? { revocation_endpoint: at(options.revocationEndpoint) } : {}),
    ...(options.introspectionEndpoint ? { introspection_endpoint: at(options.introspectionEndpoint) } : {}),
    grant_types_supported: launch
      ? ['authorization_code', 'refresh_token', 'client_credentials']
      : ['client_credentials'],
    ...(launch ? { code_challenge_methods_supported: ['S256'] } : {}),
    token_endpoint_auth_methods_supported: methods,
    token_endpoint_auth_signing_alg_values_supported: options.assertionAlgorithms ?? [
      ...CLIENT_ASSERTION_ALGORITHMS,
    ],
    scopes_supported: scopes,
    response_types_supported: launch ? ['code'] : ['token'],
    capabilities,
  };
}

/** Express handler answering `GET .../.well-known/smart-configuration` with `smartConfiguration`. */
export function smartConfigurationHandler(options: SmartConfigurationOptions = {}): RequestHandler {
  return (req, res) => {
    res.set('Cache-Control', 'public, max-age=3600').json(smartConfiguration(req, options));
  };
}

/**
 * The OpenID Connect discovery document (OpenID Connect Discovery 1.0 §3) of the server that issues
 * SMART apps' `id_token`s, served at `{issuer}/.well-known/openid-configuration` so that an app can
 * find the keys to check one. Built from the SMART configuration (`authorizationEndpoint` set): the
 * same issuer and endpoints, plus the OpenID fields. `signingAlgorithms` are the `alg`s of the keys
 * that sign tokens.
 */
export function openidConfiguration(
  req: Request,
  options: SmartConfigurationOptions & { authorizationEndpoint: string },
  signingAlgorithms: readonly string[],
): Record<string, unknown> {
  const smart = smartConfiguration(req, options);
  const pick = (...names: string[]) =>
    Object.fromEntries(names.filter((n) => smart[n] !== undefined).map((n) => [n, smart[n]]));
  return {
    ...pick('issuer', 'authorization_endpoint', 'token_endpoint', 'jwks_uri'),
    ...pick('revocation_endpoint', 'introspection_endpoint'),
    response_types_supported: ['code'],
    subject_types_supported: ['public'],
    id_token_signing_alg_values_supported: [...signingAlgorithms],
    scopes_supported: (smart.scopes_supported as string[]).filter((scope) => !scope.includes('/')),
    claims_supported: ['iss', 'sub', 'aud', 'exp', 'iat', 'nonce', 'fhirUser'],
    ...pick(
      'grant_types_supported',
      'code_challenge_methods_supported',
      'token_endpoint_auth_methods_supported',
      'token_endpoint_auth_signing_alg_values_supported',
    ),
  };
}

/** Express handler answering `GET {issuer}/.well-known/openid-configuration` with `openidConfiguration`. */
export function openidConfigurationHandler(
  options: SmartConfigurationOptions & { authorizationEndpoint: string },
  signingAlgorithms: () => Promise<readonly string[]>,
): RequestHandler {
  return (req, res, next) => {
    signingAlgorithms().then(
      (algorithms) => {
        res.set('Cache-Control', 'public, max-age=3600').json(openidConfiguration(req, options, algorithms));
      },
      (error: unknown) => next(error),
    );
  };
}

/**
 * The discovery documents of a platform that issues user tokens: the SMART configuration at the root
 * and under the FHIR base (its `issuer` the platform's), and the OpenID Connect discovery document at
 * the root (its `issuer` the tokens' `iss`, where an app checking an id_token finds the keys).
 */
export function discoveryRouter(input: {
  options: SmartConfigurationOptions & { authorizationEndpoint: string };
  fhirPath: string;
  smartIssuer: SmartConfigurationOptions['issuer'];
  tokenIssuer: SmartConfigurationOptions['issuer'];
  signingAlgorithms: () => Promise<readonly string[]>;
}): Router {
  const router = Router();
  const smart = smartConfigurationHandler({ ...input.options, issuer: input.smartIssuer });
  router.get('/.well-known/smart-configuration', smart);
  router.get(`${input.fhirPath}/.well-known/smart-configuration`, smart);
  router.get(
    '/.well-known/openid-configuration',
    openidConfigurationHandler({ ...input.options, issuer: input.tokenIssuer }, input.signingAlgorithms),
  );
  return router;
}

/** The other OAuth endpoints {@link smartSecurity} lists, absolute URLs. */
export interface SmartSecurityEndpoints {
  /** The authorization endpoint (SMART App Launch); absent: backend services only. @default undefined */
  authorize?: string;
  /** The token revocation endpoint (RFC 7009). @default undefined */
  revoke?: string;
  /** The token introspection endpoint (RFC 7662). @default undefined */
  introspect?: string;
}

/** `rest.security.description`: how a client gets a token here, in Markdown. */
function securityDescription(launch: boolean): string {
  const backend =
    'SMART Backend Services: a client registered in the project gets a `system/` token with the ' +
    'client credentials grant (`private_key_jwt` or a client secret) at the token endpoint.';
  const discovery = 'The endpoints are listed at `.well-known/smart-configuration` under the FHIR base.';
  if (!launch) return `OAuth 2.0 bearer tokens. ${backend} ${discovery}`;
  return [
    'OAuth 2.0 bearer tokens.',
    'SMART App Launch: an app sends its user to the authorization endpoint (authorization code with PKCE)',
    'and gets a `user/` or `patient/` token at the token endpoint.',
    backend,
    discovery,
  ].join(' ');
}

/**
 * The `CapabilityStatement.rest.security` block declaring SMART on FHIR security: the
 * `SMART-on-FHIR` service, a description of SMART App Launch (with an `authorize` endpoint) and
 * Backend Services, and the `oauth-uris` extension with the token URL and the `endpoints` given.
 * `tokenUrl` is absolute.
 * @see https://hl7.org/fhir/smart-app-launch/STU2/conformance.html
 */
export function smartSecurity(
  tokenUrl: string,
  endpoints: SmartSecurityEndpoints = {},
): Record<string, unknown> {
  const uris = [
    ...(endpoints.authorize === undefined ? [] : [{ url: 'authorize', valueUri: endpoints.authorize }]),
    { url: 'token', valueUri: tokenUrl },
    ...(endpoints.revoke === undefined ? [] : [{ url: 'revoke', valueUri: endpoints.revoke }]),
    ...(endpoints.introspect === undefined ? [] : [{ url: 'introspect', valueUri: endpoints.introspect }]),
  ];
  const launch = endpoints.authorize !== undefined;
  return {
    extension: [
      { url: 'http://fhir-registry.smarthealthit.org/StructureDefinition/oauth-uris', extension: uris },
    ],
    service: [
      {
        coding: [
          { system: 'http://terminology.hl7.org/CodeSystem/restful-security-service', code: 'SMART-on-FHIR' },
        ],
        text: launch
          ? 'OAuth2 using SMART-on-FHIR profile (SMART App Launch and SMART Backend Services)'
          : 'OAuth2 using SMART-on-FHIR profile (SMART Backend Services)',
      },
    ],
    description: securityDescription(launch),
  };
}
