/**
 * The SCIM settings a request runs with: the project's own (`ProjectRecord.scim`, set by
 * `Project/$init` or `Project/{id}/$settings`) over the router's options.
 */
import { NotFoundError } from '../storage/errors.js';
import type { ProjectScimSettings, Storage } from '../storage/types.js';
import { USER_TYPES } from './schema.js';
import type { ScimUserSettings } from './user-service.js';

/** `project` settings over `router` settings; stored values of the wrong type are ignored. */
export function mergeScimSettings(
  router: ScimUserSettings,
  project: ProjectScimSettings | undefined,
): ScimUserSettings {
  const own = project ?? {};
  const defaultUserType = USER_TYPES.find((t) => t === own.defaultUserType) ?? router.defaultUserType;
  return {
    ...(defaultUserType ? { defaultUserType } : {}),
    echoUserName: typeof own.echoUserName === 'boolean' ? own.echoUserName : router.echoUserName,
  };
}

/** The settings of project `projectId` (the router's alone when the project record is gone). */
export async function projectScimSettings(
  storage: Storage,
  projectId: string,
  router: ScimUserSettings,
): Promise<ScimUserSettings> {
  try {
    return mergeScimSettings(router, (await storage.readProject(projectId)).scim);
  } catch (error) {
    if (error instanceof NotFoundError) return router;
    throw error;
  }
}
