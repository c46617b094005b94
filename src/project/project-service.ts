/**
 * The project administration operations, framework-free: each takes the calling principal and the
 * request's input (ids from the path, the `Parameters` body), checks the principal's rights, and
 * returns the resource to answer or throws: `FhirError` for protocol errors (403, 404, invalid
 * parameters), storage errors otherwise. `projectRouter` maps HTTP to them. See docs/project-init.md.
 */
import type { AuditRecord } from '../audit/events.js';
import { recordSafely } from '../audit/record-safely.js';
import type { AuditTrail } from '../audit/trail.js';
import { defaultErrorLogger } from '../http/error-rendering.js';
import type { Principal } from '../http/principal.js';
import { FhirError } from '../http/http-error.js';
import { NotFoundError } from '../storage/errors.js';
import type { ClientRecord, ProjectRecord, Storage } from '../storage/types.js';
import { clientApplicationResource, type ClientApplicationResource } from './client-application.js';
import {
  initProject,
  ownerDefaultsFromUser,
  parseInitParameters,
  type OwnerDefaults,
} from './init-project.js';
import { parseNewClientParameters, registerClient, type NewClientRules } from './new-client.js';
import { readParameters } from '../http/fhir-parameters.js';
import { projectAdminAccess } from './project-access.js';
import { projectResource, type ProjectResource } from './project-resource.js';
import { parseSettingsParameters, updateProjectSettings } from './project-settings.js';

export interface ProjectServiceConfig {
  storage: Storage;
  /** What `$new-client` accepts and its defaults. */
  rules: NewClientRules;
  /** Who may call `$init`. */
  allowInit: (principal: Principal) => boolean;
  /** Records `$init`, client registration and revocation. @default undefined (nothing recorded) */
  auditTrail?: AuditTrail;
  /** Receives a failure to record an event (it never fails the operation). @default console.error */
  onError?: (error: unknown) => void;
}

/** A searchset `Bundle` of `ClientApplication`s. */
export interface ClientApplicationBundle {
  resourceType: 'Bundle';
  type: 'searchset';
  total: number;
  link: { relation: string; url: string }[];
  entry: { fullUrl: string; resource: ClientApplicationResource; search: { mode: 'match' } }[];
}

/** The administration operations of {@link projectService}. */
export interface ProjectService {
  /** `Project/$init`: creates a project with its admin user. */
  init(principal: Principal, body: unknown): Promise<ProjectResource>;
  /** `GET Project/{id}`: the project, for its admins and the super admin (404 for anyone else). */
  read(principal: Principal, projectId: string): Promise<ProjectResource>;
  /** `$new-client`: registers a client; the answer holds its secret, once. */
  newClient(principal: Principal, projectId: string, body: unknown): Promise<ClientApplicationResource>;
  /** The project's clients; `selfUrl` is the list's URL (`.../Project/{id}/ClientApplication`). */
  listClients(principal: Principal, projectId: string, selfUrl: string): Promise<ClientApplicationBundle>;
  /** One client of the project. */
  readClient(principal: Principal, projectId: string, clientId: string): Promise<ClientApplicationResource>;
  /** Revokes a client of the project (already revoked: unchanged). */
  revokeClient(principal: Principal, projectId: string, clientId: string): Promise<ClientApplicationResource>;
  /** `$revoke-client`: revokes the client named by the `clientId` parameter. */
  revokeClientByParameters(
    principal: Principal,
    projectId: string,
    body: unknown,
  ): Promise<ClientApplicationResource>;
  /** `$settings`: changes the project's settings. */
  changeSettings(principal: Principal, projectId: string, body: unknown): Promise<ProjectResource>;
}

const REVOKE_PARAMETERS = { clientId: { type: ['string', 'id'], required: true } } as const;

function notFound(what: string): FhirError {
  return new FhirError(404, 'not-found', `${what} not found`);
}

/** The project administration operations over `storage`. */
export function projectService(config: ProjectServiceConfig): ProjectService {
  const { storage, rules, allowInit } = config;

  /** Loads the project `id` when the caller may administer it; 404 or 403 otherwise. */
  async function administeredProject(
    principal: Principal,
    id: string,
    hideFromMembers = false,
  ): Promise<ProjectRecord> {
    const access = projectAdminAccess(principal, id);
    if (access === 'hidden' || (access === 'forbidden' && hideFromMembers)) throw notFound('Project');
    if (access === 'forbidden') throw new FhirError(403, 'forbidden', 'Only the project admins may do this');
    try {
      return await storage.readProject(id);
    } catch (error) {
      if (error instanceof NotFoundError) throw notFound('Project');
      throw error;
    }
  }

  async function projectClient(projectId: string, clientId: string): Promise<ClientRecord> {
    try {
      const client = await storage.readClient(clientId);
      if (client.projectId === projectId) return client;
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
    }
    throw notFound('ClientApplication');
  }

  async function revoke(projectId: string, clientId: string): Promise<ClientRecord> {
    const client = await projectClient(projectId, clientId);
    const revoked = client.revoked ? client : await storage.updateClient(client.id, { revoked: true });
    // Its users' refresh tokens and codes go too (its tokens already stop at bearerAuth).
    await storage.grants?.revoke({ projectId, clientId: client.id });
    return revoked;
  }

  const trail = config.auditTrail;
  const onError = config.onError ?? defaultErrorLogger;
  // Recording never fails the operation: a failure goes to onError.
  const audit = trail && { record: (record: AuditRecord) => recordSafely(trail, record, onError) };
  const actor = (principal: Principal) => ({ kind: principal.kind, id: principal.id });
  const auditClient = (principal: Principal, action: 'register' | 'revoke', client: ClientRecord) =>
    audit?.record({
      kind: 'client',
      action,
      clientId: client.id,
      clientName: client.name,
      projectId: client.projectId,
      actor: actor(principal),
    });

  return {
    async init(principal, body) {
      if (!allowInit(principal)) throw new FhirError(403, 'forbidden', 'The caller may not create projects');
      const input = parseInitParameters(body);
      let defaults: OwnerDefaults = {};
      if (principal.kind === 'user' && principal.projectId) {
        try {
          defaults = ownerDefaultsFromUser(await storage.readUser(principal.projectId, principal.id));
        } catch (error) {
          if (!(error instanceof NotFoundError)) throw error;
        }
      }
      const { project } = await initProject(storage, input, defaults);
      audit?.record({
        kind: 'project-init',
        projectName: project.name,
        projectId: project.id,
        actor: actor(principal),
      });
      return projectResource(project);
    },

    async read(principal, projectId) {
      return projectResource(await administeredProject(principal, projectId, true));
    },

    async newClient(principal, projectId, body) {
      const project = await administeredProject(principal, projectId);
      const input = parseNewClientParameters(body, rules);
      const { client, secret } = await registerClient(storage, project.id, input);
      auditClient(principal, 'register', client);
      return clientApplicationResource(client, secret);
    },

    async listClients(principal, projectId, selfUrl) {
      const project = await administeredProject(principal, projectId);
      const clients = await storage.listClients(project.id);
      return {
        resourceType: 'Bundle',
        type: 'searchset',
        total: clients.length,
        link: [{ relation: 'self', url: selfUrl }],
        entry: clients.map((client) => ({
          fullUrl: `${selfUrl}/${client.id}`,
          resource: clientApplicationResource(client),
          search: { mode: 'match' },
        })),
      };
    },

    async readClient(principal, projectId, clientId) {
      const project = await administeredProject(principal, projectId);
      return clientApplicationResource(await projectClient(project.id, clientId));
    },

    async revokeClient(principal, projectId, clientId) {
      const project = await administeredProject(principal, projectId);
      const client = await revoke(project.id, clientId);
      auditClient(principal, 'revoke', client);
      return clientApplicationResource(client);
    },

    async revokeClientByParameters(principal, projectId, body) {
      const project = await administeredProject(principal, projectId);
      const { clientId } = readParameters(body, REVOKE_PARAMETERS);
      const client = await revoke(project.id, clientId.value);
      auditClient(principal, 'revoke', client);
      return clientApplicationResource(client);
    },

    async changeSettings(principal, projectId, body) {
      const project = await administeredProject(principal, projectId);
      const change = parseSettingsParameters(body, {
        allowPrivateAddresses: rules.allowPrivateImportAddresses,
      });
      let updated: ProjectRecord;
      try {
        updated = await updateProjectSettings(storage, project.id, change);
      } catch (error) {
        if (error instanceof NotFoundError) throw notFound('Project');
        throw error;
      }
      return projectResource(updated);
    },
  };
}
