import type { ProjectRecord, ProjectScimSettings } from '../storage/types.js';

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
    meta: { versionId: String(project.version), lastUpdated: project.updatedAt },
  };
}
