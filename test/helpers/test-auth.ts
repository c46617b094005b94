import type { Request } from 'express';
import type { Authenticate, Principal } from '../../src/http/principal.js';

const PREFIX = 'Bearer test.';

/** A bearer token the test authenticator turns back into `principal`. */
export function testToken(principal: Partial<Principal> & { projectId: string | null }): string {
  const full: Principal = {
    kind: 'client',
    id: 'test-client',
    scopes: ['system/*.*'],
    admin: false,
    superAdmin: false,
    ...principal,
  };
  return `${PREFIX}${Buffer.from(JSON.stringify(full)).toString('base64url')}`;
}

/** Authenticates `Authorization: Bearer test.<base64url JSON principal>`; anything else is anonymous. */
export const testAuthenticate: Authenticate = (req: Request) => {
  const header = req.headers.authorization;
  if (!header?.startsWith(PREFIX)) return undefined;
  try {
    return JSON.parse(Buffer.from(header.slice(PREFIX.length), 'base64url').toString('utf8')) as Principal;
  } catch {
    return undefined;
  }
};
