import { recordSafely } from './audit/record-safely.js';
import type { Principal } from './http/principal.js';
import { PLATFORM_ADMIN_SCOPE } from './auth/access/admin-scopes.js';
import type { ClientApplicationResource } from './project/client-application.js';
import type { ProjectResource } from './project/project-resource.js';
import { resolveProjectRouterOptions, type ProjectRouterOptions } from './project/router.js';
import { projectService } from './project/project-service.js';
import { projectScimSettings } from './scim/project-settings.js';
import { resolveScimRouterOptions, type ScimRouterOptions } from './scim/router.js';
import { USER_RESOURCE_SCHEMAS } from './scim/schema.js';
import { userToScim } from './scim/user-mapping.js';
import { scimUserService, type ScimUserSettings } from './scim/user-service.js';

/** A FHIR `Parameters` resource, as `$init` and `$new-client` take it. */
export interface ParametersResource {
  resourceType: 'Parameters';
  parameter?: { name: string; [value: string]: unknown }[];
}

/**
 * Administration without HTTP, for hosts that run their own authentication or seed data at deploy
 * time. Each call goes through the same service code as the HTTP operation it names (same
 * validation, same storage transaction, same errors), acting as the platform's super admin.
 */
export interface PlatformAdmin {
  /** `Project/$init`: a new project with its admin user (the `$init` Parameters). */
  initProject(parameters: ParametersResource): Promise<ProjectResource>;
  /** `$new-client`: registers a client in the project; the answer holds its secret, once. */
  newClient(projectId: string, parameters: ParametersResource): Promise<ClientApplicationResource>;
  /** Revokes a client of the project (already revoked: unchanged). */
  revokeClient(projectId: string, clientId: string): Promise<ClientApplicationResource>;
  /**
   * SCIM `POST /Users` in the project: the user, its profile resource and its membership. Answers
   * the SCIM document; `meta.location` is relative (`Users/{id}`) unless `scimBaseUrl` is given.
   */
  createUser(
    projectId: string,
    user: Record<string, unknown>,
    scimBaseUrl?: string,
  ): Promise<Record<string, unknown>>;
}

/** The principal administration calls act as. */
const PLATFORM: Principal = {
  projectId: null,
  kind: 'super-admin',
  id: 'platform-admin',
  scopes: [PLATFORM_ADMIN_SCOPE],
  admin: false,
  superAdmin: true,
};

/**
 * Builds the administration functions over the options the project and SCIM routers get (so a
 * project's `$new-client` rules and SCIM settings apply the same way). `fhirPlatform` exposes one as
 * `platform.admin`.
 */
export function platformAdmin(options: {
  project: ProjectRouterOptions;
  scim: ScimRouterOptions;
}): PlatformAdmin {
  const project = resolveProjectRouterOptions(options.project);
  // Administration may always create projects: allowInit governs HTTP callers only.
  const projects = projectService({
    storage: project.storage,
    rules: project.rules,
    allowInit: () => true,
    ...(project.auditTrail ? { auditTrail: project.auditTrail } : {}),
    ...(project.onError ? { onError: project.onError } : {}),
  });
  const scim = resolveScimRouterOptions(options.scim);
  const routerSettings: ScimUserSettings = {
    echoUserName: scim.echoUserName,
    ...(scim.defaultUserType ? { defaultUserType: scim.defaultUserType } : {}),
  };
  const users = scimUserService({
    storage: scim.storage,
    schemas: USER_RESOURCE_SCHEMAS,
    echoUserName: scim.echoUserName,
    maxOperations: scim.maxPatchOperations,
    maxAttempts: scim.maxWriteAttempts,
  });
  return {
    initProject: (parameters) => projects.init(PLATFORM, parameters),
    newClient: (projectId, parameters) => projects.newClient(PLATFORM, projectId, parameters),
    revokeClient: (projectId, clientId) => projects.revokeClient(PLATFORM, projectId, clientId),
    async createUser(projectId, user, scimBaseUrl) {
      await projects.read(PLATFORM, projectId); // 404 for a project that does not exist
      const settings = await projectScimSettings(scim.storage, projectId, routerSettings);
      const record = await users.create(projectId, user, settings);
      // Recorded as the SCIM router records a create, the platform administration as the actor.
      if (scim.auditTrail)
        recordSafely(
          scim.auditTrail,
          {
            kind: 'scim-user',
            action: 'create',
            userId: record.id,
            profile: `${record.userType}/${record.profileId}`,
            actor: { kind: PLATFORM.kind, id: PLATFORM.id },
            projectId,
          },
          (error) => scim.onError?.(error),
        );
      const path = `Users/${encodeURIComponent(record.id)}`;
      return userToScim(record, {
        location: scimBaseUrl ? `${scimBaseUrl.replace(/\/+$/, '')}/${path}` : path,
        echoUserName: settings.echoUserName,
      });
    },
  };
}
