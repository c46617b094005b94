import { describe, expect, it } from 'vitest';
import type { Principal } from '../../src/http/principal.js';
import { projectAdminAccess, superAdminOnly } from '../../src/project/project-access.js';

const principal = (p: Partial<Principal>): Principal => ({
  projectId: 'p1',
  kind: 'client',
  id: 'c1',
  scopes: [],
  admin: false,
  superAdmin: false,
  ...p,
});

describe('projectAdminAccess', () => {
  it('allows the super admin and the project admins', () => {
    expect(
      projectAdminAccess(principal({ projectId: null, kind: 'super-admin', superAdmin: true }), 'p1'),
    ).toBe('allowed');
    expect(projectAdminAccess(principal({ admin: true }), 'p1')).toBe('allowed');
  });

  it('forbids members and hides the project from others', () => {
    expect(projectAdminAccess(principal({}), 'p1')).toBe('forbidden');
    expect(projectAdminAccess(principal({ admin: true }), 'p2')).toBe('hidden');
  });

  it('lets only the super admin init by default', () => {
    expect(superAdminOnly(principal({ superAdmin: true }))).toBe(true);
    expect(superAdminOnly(principal({ admin: true }))).toBe(false);
  });
});
