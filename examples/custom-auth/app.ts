// A host app with its own authentication: its identity provider signs the tokens (HS256 with a
// shared secret here, to stay self-contained), and fhir-platform-kit's routers are mounted under
// `/api` with an `authenticate` that turns those tokens into principals. See docs/auth.md.
import express from 'express';
import { jwtVerify, SignJWT } from 'jose';
import {
  fhirPlatform,
  splitScopes,
  unauthorized,
  type Authenticate,
  type FhirPlatform,
  type Storage,
} from 'fhir-platform-kit';

/** The claims this host's identity provider puts in its tokens. */
export interface HostClaims {
  /** The login name (the SCIM `userName` the IdP provisions), or a service name. */
  sub: string;
  /** The project the caller acts in; absent for the host's operators. */
  tenant?: string;
  /** `operator` (creates projects), `provisioner` (SCIM sync of a tenant), or `user`. */
  role: 'operator' | 'provisioner' | 'user';
  /** SMART scopes, space-separated. */
  scope?: string;
}

const ISSUER = 'https://login.host.example';
const AUDIENCE = 'https://api.host.example';

/** Signs a token as the host's identity provider would. */
export async function hostToken(secret: Uint8Array, claims: HostClaims): Promise<string> {
  const { sub, ...rest } = claims;
  return new SignJWT({ ...rest })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(sub)
    .setIssuer(ISSUER)
    .setAudience(AUDIENCE)
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(secret);
}

/** The host's `authenticate`: its own tokens become platform principals. */
export function hostAuthenticate(storage: Storage, secret: Uint8Array): Authenticate {
  return async (req) => {
    const match = /^Bearer (\S+)$/i.exec(req.headers.authorization ?? '');
    if (!match) return undefined;
    let claims: HostClaims;
    try {
      const { payload } = await jwtVerify(match[1]!, secret, {
        issuer: ISSUER,
        audience: AUDIENCE,
        algorithms: ['HS256'],
      });
      claims = payload as unknown as HostClaims;
    } catch {
      throw unauthorized('Invalid token', 'invalid_token');
    }
    const scopes = splitScopes(claims.scope);
    if (claims.role === 'operator') {
      return { projectId: null, kind: 'super-admin', id: claims.sub, scopes, admin: false, superAdmin: true };
    }
    if (!claims.tenant) throw unauthorized('The token names no tenant', 'invalid_token');
    if (claims.role === 'provisioner') {
      // The IdP's SCIM connector: a project admin that is not a stored user.
      return {
        projectId: claims.tenant,
        kind: 'client',
        id: claims.sub,
        scopes,
        admin: true,
        superAdmin: false,
      };
    }
    // A person: the SCIM user the IdP provisioned for this login.
    const [user] = await storage.findUsers(claims.tenant, { userName: claims.sub });
    if (!user) throw unauthorized('Unknown user', 'invalid_token');
    return { projectId: claims.tenant, kind: 'user', id: user.id, scopes, admin: false, superAdmin: false };
  };
}

/** The host app: its own routes plus the platform under `/api`. */
export function createHostApp(options: { storage: Storage; exportDir: string; secret: Uint8Array }): {
  app: express.Express;
  platform: FhirPlatform;
} {
  const platform = fhirPlatform({
    storage: options.storage,
    exportDir: options.exportDir,
    baseUrl: AUDIENCE,
    authenticate: hostAuthenticate(options.storage, options.secret),
  });
  const app = express();
  app.get('/', (_req, res) => {
    res.json({ service: 'host app', api: `${AUDIENCE}/api/fhir/R4` });
  });
  app.use('/api', platform.router);
  return { app, platform };
}
