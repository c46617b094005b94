import type { ProjectRecord } from '../storage/types.js';

/** The `Project` resource the project operations answer (a custom, non-R4 resource type). */
export interface ProjectResource {
  resourceType: 'Project';
  id: string;
  name: string;
  description?: string;
  strictMode: boolean;
  /** The project's first admin (`User/<id>`). */
  owner?: { reference: string };
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
    meta: { versionId: String(project.version), lastUpdated: project.updatedAt },
  };
}
