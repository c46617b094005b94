import type { ProjectRecord, ProjectScimSettings } from '../storage/types.js';
import { groupRolesView, type GroupRoleView } from './group-role-settings.js';
import { identityProviderView, type IdentityProviderView } from './identity-provider-settings.js';
import { importSourcesView, type ImportSourceView } from './import-source-settings.js';

/** The `Project` resource the project operations answer (a custom, non-R4 resource type). */
export interface ProjectResource {
  resourceType: 'Project';
  id: string;
  name: string;
  description?: string;
  strictMode: boolean;
  /** The project's first admin (`User/<id>`). */
  owner?: { reference: string };
  /** The project's own SCIM settings (see `Project/{id}/$settings`), when it has any. */
  scim?: ProjectScimSettings;
  /** The project's OpenID Connect identity provider, without its secret or private key. */
  identityProvider?: IdentityProviderView;
  /** The roles of the project's SCIM Groups (see `Project/{id}/$settings`), when it has any. */
  groupRoles?: GroupRoleView[];
  /** The servers the project's `$import` pulls from, without their private keys, when it has any. */
  importSources?: ImportSourceView[];
  meta: { versionId: string; lastUpdated: string };
}

/** Renders a stored project as a `Project` resource. */
export function projectResource(project: ProjectRecord): ProjectResource {
  return {
    resourceType: 'Project',
    id: project.id,
    name: project.name,
    ...(project.description !== undefined ? { description: project.description } : {}),
    strictMode: project.strictMode,
    ...(project.ownerUserId !== undefined ? { owner: { reference: `User/${project.ownerUserId}` } } : {}),
    ...(project.scim && Object.keys(project.scim).length > 0 ? { scim: { ...project.scim } } : {}),
    ...(project.identityProvider ? { identityProvider: identityProviderView(project.identityProvider) } : {}),
    ...(project.groupRoles?.length ? { groupRoles: groupRolesView(project.groupRoles) } : {}),
    ...(project.importSources?.length ? { importSources: importSourcesView(project.importSources) } : {}),
    meta: { versionId: String(project.version), lastUpdated: project.updatedAt },
  };
}
