/**
 * What distinguishes each kind of audit event in its R4 `AuditEvent` (docs/audit-events.md, one
 * example per kind): the `type` and `subtype` codes (DICOM, FHIR `restful-interaction`), the
 * `action`, the `outcome` and the `entity` list. `buildAuditEvent` adds what every event has.
 */
import type { AuditEventEntity, AuditReference } from './audit-event-resource.js';
import {
  ENTITY_KIND,
  ENTITY_ROLE,
  EVENT_SUBTYPE,
  EVENT_TYPE,
  IDENTIFIER_SYSTEMS,
  RESOURCE_TYPES,
  restfulInteraction,
  type AuditAction,
  type AuditOutcomeCode,
  type Coding,
} from './codes.js';
import type {
  AuditRecord,
  AuthorizationEvent,
  ClientEvent,
  DownloadEvent,
  ExportEvent,
  ImportEvent,
  FhirAccessEvent,
  FhirWriteEvent,
  ProjectInitEvent,
  RefusedEvent,
  RepeatedRefusals,
  ScimUserEvent,
  SignInEvent,
  TokenEvent,
} from './events.js';

/** What distinguishes one kind of event: codes, action, outcome and entities. */
export interface Described {
  type: Coding;
  subtype: Coding[];
  action: AuditAction;
  outcome: AuditOutcomeCode;
  outcomeDesc?: string;
  entity: AuditEventEntity[];
}

function detail(type: string, value: string | number): { type: string; valueString: string } {
  return { type, valueString: String(value) };
}

/** The details of refusals counted together: how many, and whether from sources over the limit. */
function repeatedDetails(repeated: RepeatedRefusals | undefined): { type: string; valueString: string }[] {
  if (repeated === undefined) return [];
  return [detail('count', repeated.count), ...(repeated.overflow ? [detail('overflow', 'true')] : [])];
}

function base64(text: string): string {
  return Buffer.from(text, 'utf8').toString('base64');
}

/** An entity naming a FHIR resource (`Observation/1`). */
function resourceEntity(reference: string): AuditEventEntity {
  const type = reference.slice(0, reference.indexOf('/'));
  return {
    what: { reference },
    type: { system: RESOURCE_TYPES, code: type },
    role: type === 'Patient' ? ENTITY_ROLE.patient : ENTITY_ROLE.domainResource,
  };
}

function identified(system: string, value: string, display?: string): AuditReference {
  return { identifier: { system, value }, ...(display !== undefined ? { display } : {}) };
}

function actionOfMethod(method: string, path: string): AuditAction {
  if (path.includes('$')) return 'E';
  switch (method.toUpperCase()) {
    case 'GET':
    case 'HEAD':
      return 'R';
    case 'POST':
      return 'C';
    case 'PUT':
    case 'PATCH':
      return 'U';
    case 'DELETE':
      return 'D';
    default:
      return 'E';
  }
}

const SCIM_ACTION = { create: 'C', update: 'U', deactivate: 'U', delete: 'D' } as const;
const SCIM_INTERACTION = {
  create: 'create',
  update: 'update',
  deactivate: 'update',
  delete: 'delete',
} as const;
const WRITE_ACTION = { create: 'C', update: 'U', delete: 'D' } as const;
const AUTHORIZATION_REFUSALS = {
  consent: 'consent refused',
  deny: 'the user denied access',
  refresh: 'refresh refused',
  reuse: 'a used code or refresh token came again: its tokens are revoked',
  revoke: 'revocation refused',
} as const;
const ROLES_REFUSAL = "the roles of the user's groups allow none of the data scopes asked for";

/** A token request granted or refused (refusals of one client may be counted together). */
function tokenEvent(record: TokenEvent): Described {
  const details = record.scopes?.length ? [detail('scope', record.scopes.join(' '))] : [];
  if (record.scopeLength !== undefined) details.push(detail('truncated', record.scopeLength));
  details.push(...repeatedDetails(record.repeated));
  const entity: AuditEventEntity[] = [];
  if (record.actor.id !== undefined) {
    entity.push({
      what: identified(IDENTIFIER_SYSTEMS.client, record.actor.id),
      type: ENTITY_KIND.systemObject,
      role: ENTITY_ROLE.securityResource,
      ...(details.length > 0 ? { detail: details } : {}),
    });
  } else if (record.repeated !== undefined) {
    // No client to hang the count on (none claimed, or callers over maxRefusalSources).
    entity.push({
      type: ENTITY_KIND.systemObject,
      role: ENTITY_ROLE.securityResource,
      description: 'refused token requests',
      detail: details,
    });
  }
  return {
    type: EVENT_TYPE.userAuthentication,
    subtype: [EVENT_SUBTYPE.login],
    action: 'E',
    outcome: record.result === 'granted' ? '0' : '4',
    ...(record.result === 'refused' ? { outcomeDesc: record.error ?? 'refused' } : {}),
    entity,
  };
}

/** A SCIM user created, changed, deactivated or deleted. */
function scimUserEvent(record: ScimUserEvent): Described {
  return {
    type: EVENT_TYPE.securityAlert,
    subtype: [
      EVENT_SUBTYPE.userSecurityAttributesChanged,
      restfulInteraction(SCIM_INTERACTION[record.action]),
    ],
    action: SCIM_ACTION[record.action],
    outcome: '0',
    entity: [
      {
        what: {
          ...(record.profile !== undefined ? { reference: record.profile } : {}),
          identifier: { system: IDENTIFIER_SYSTEMS.user, value: record.userId },
        },
        type: ENTITY_KIND.person,
        role: ENTITY_ROLE.securityUser,
        ...(record.action === 'deactivate' ? { detail: [detail('active', 'false')] } : {}),
      },
    ],
  };
}

/** A project created by `Project/$init`. */
function projectInitEvent(record: ProjectInitEvent): Described {
  return {
    type: EVENT_TYPE.securityAlert,
    subtype: [EVENT_SUBTYPE.securityConfiguration, restfulInteraction('operation')],
    action: 'C',
    outcome: '0',
    entity:
      record.projectId === null
        ? []
        : [
            {
              what: identified(IDENTIFIER_SYSTEMS.project, record.projectId, record.projectName),
              type: ENTITY_KIND.systemObject,
              role: ENTITY_ROLE.securityResource,
              detail: [detail('operation', '$init')],
            },
          ],
  };
}

/** A client registered (`$new-client`) or revoked. */
function clientEvent(record: ClientEvent): Described {
  return {
    type: EVENT_TYPE.securityAlert,
    subtype:
      record.action === 'register'
        ? [EVENT_SUBTYPE.securityRolesChanged, restfulInteraction('operation')]
        : [EVENT_SUBTYPE.securityRolesChanged],
    action: record.action === 'register' ? 'C' : 'U',
    outcome: '0',
    entity: [
      {
        what: identified(IDENTIFIER_SYSTEMS.client, record.clientId, record.clientName),
        type: ENTITY_KIND.systemObject,
        role: ENTITY_ROLE.securityUser,
        detail: [detail('operation', record.action === 'register' ? '$new-client' : 'revoke')],
      },
    ],
  };
}

/** FHIR resources created, updated or deleted (a Bundle names each, up to a count). */
function fhirWriteEvent(record: FhirWriteEvent): Described {
  const entity = record.references.map(resourceEntity);
  const count = record.count ?? record.references.length;
  if (count !== record.references.length) {
    entity.push({
      type: ENTITY_KIND.systemObject,
      role: ENTITY_ROLE.domainResource,
      description: `${count} resources written (${record.interaction})`,
      detail: [detail('count', count)],
    });
  }
  return {
    type: EVENT_TYPE.patientRecord,
    subtype: [restfulInteraction(record.interaction)],
    action: WRITE_ACTION[record.interaction],
    outcome: '0',
    entity,
  };
}

/** A read or search of patient data: the resource or the query, and each patient reached. */
function fhirAccessEvent(record: FhirAccessEvent): Described {
  const entity: AuditEventEntity[] = [];
  if (record.reference !== undefined) entity.push(resourceEntity(record.reference));
  if (record.interaction === 'search-type') {
    entity.push({
      type: ENTITY_KIND.systemObject,
      role: ENTITY_ROLE.query,
      description: `${record.resourceType} search`,
      query: base64(record.query ?? ''),
      ...(record.count !== undefined ? { detail: [detail('count', record.count)] } : {}),
    });
  }
  // A read of a Patient names it once (a vread's reference carries `/_history/<vid>`).
  const read = record.reference?.split('/_history/')[0];
  for (const id of record.patientIds ?? []) {
    if (read !== `Patient/${id}`) entity.push(resourceEntity(`Patient/${id}`));
  }
  const search = record.interaction === 'search-type';
  return {
    type: search ? EVENT_TYPE.query : EVENT_TYPE.patientRecord,
    subtype: [restfulInteraction(record.interaction)],
    action: search ? 'E' : 'R',
    outcome: '0',
    entity,
  };
}

/** A Bulk Data export kicked off, completed, failed or refused. */
function exportEvent(record: ExportEvent): Described {
  const details = [detail('phase', record.phase), detail('level', record.level)];
  if (record.types?.length) details.push(detail('_type', record.types.join(',')));
  if (record.since !== undefined) details.push(detail('_since', record.since));
  if (record.until !== undefined) details.push(detail('_until', record.until));
  if (record.organizeOutputBy !== undefined)
    details.push(detail('organizeOutputBy', record.organizeOutputBy));
  if (record.allowPartialManifests) details.push(detail('allowPartialManifests', 'true'));
  for (const [type, count] of Object.entries(record.counts ?? {}))
    details.push(detail(`count:${type}`, count));
  const refused = record.phase === 'kickoff' && record.error !== undefined;
  if (refused && record.status !== undefined) details.push(detail('status', record.status));
  const entity: AuditEventEntity[] = [
    {
      ...(record.jobId !== undefined ? { what: identified(IDENTIFIER_SYSTEMS.exportJob, record.jobId) } : {}),
      type: ENTITY_KIND.systemObject,
      role: ENTITY_ROLE.job,
      detail: details,
    },
  ];
  if (record.groupId !== undefined) entity.push(resourceEntity(`Group/${record.groupId}`));
  let outcome: AuditOutcomeCode = '0';
  if (record.phase === 'failed') outcome = '8';
  else if (refused) outcome = (record.status ?? 400) >= 500 ? '8' : '4';
  return {
    type: EVENT_TYPE.export,
    subtype: record.phase === 'kickoff' ? [restfulInteraction('operation')] : [],
    action: 'E',
    outcome,
    ...(record.phase === 'failed' || refused ? { outcomeDesc: record.error ?? 'export failed' } : {}),
    entity,
  };
}

/** A `$import` kicked off, completed, failed, cancelled or refused. */
function importEvent(record: ImportEvent): Described {
  const details = [detail('phase', record.phase)];
  if (record.source !== undefined) details.push(detail('source', record.source));
  for (const [type, count] of Object.entries(record.counts ?? {}))
    details.push(detail(`count:${type}`, count));
  if (record.deleted !== undefined) details.push(detail('deleted', record.deleted));
  if (record.refused !== undefined) details.push(detail('refused', record.refused));
  const refused = record.phase === 'kickoff' && record.error !== undefined;
  if (refused && record.status !== undefined) details.push(detail('status', record.status));
  let outcome: AuditOutcomeCode = '0';
  if (record.phase === 'failed') outcome = '8';
  else if (refused) outcome = (record.status ?? 400) >= 500 ? '8' : '4';
  return {
    type: EVENT_TYPE.import,
    subtype: record.phase === 'kickoff' ? [restfulInteraction('operation')] : [],
    action: 'C',
    outcome,
    ...(record.phase === 'failed' || refused ? { outcomeDesc: record.error ?? 'import failed' } : {}),
    entity: [
      {
        ...(record.jobId !== undefined
          ? { what: identified(IDENTIFIER_SYSTEMS.importJob, record.jobId) }
          : {}),
        type: ENTITY_KIND.systemObject,
        role: ENTITY_ROLE.job,
        detail: details,
      },
    ],
  };
}

/** An export file downloaded (or refused). */
function downloadEvent(record: DownloadEvent): Described {
  const details = [detail('file', record.file), detail('bytes', record.bytes)];
  if (record.range !== undefined) details.push(detail('range', record.range));
  return {
    type: EVENT_TYPE.export,
    subtype: [restfulInteraction('read')],
    action: 'R',
    outcome: record.error === undefined ? '0' : '4',
    ...(record.error !== undefined ? { outcomeDesc: record.error } : {}),
    entity: [
      {
        what: identified(IDENTIFIER_SYSTEMS.exportJob, record.jobId),
        type: ENTITY_KIND.systemObject,
        role: ENTITY_ROLE.dataDestination,
        detail: details,
      },
    ],
  };
}

/** A sign-in through the identity provider, or its refusal. */
function signInEvent(record: SignInEvent): Described {
  const details = [detail('result', record.result)];
  if (record.issuer !== undefined) details.push(detail('issuer', record.issuer));
  if (record.claim !== undefined && record.identity !== undefined)
    details.push(detail(`claim:${record.claim}`, record.identity));
  const entity: AuditEventEntity[] = [
    {
      ...(record.clientId !== undefined
        ? { what: identified(IDENTIFIER_SYSTEMS.client, record.clientId) }
        : {}),
      type: ENTITY_KIND.systemObject,
      role: ENTITY_ROLE.securityResource,
      description: 'sign-in through the identity provider',
      detail: details,
    },
  ];
  return {
    type: EVENT_TYPE.userAuthentication,
    subtype: [EVENT_SUBTYPE.login],
    action: 'E',
    outcome: record.result === 'success' ? '0' : '4',
    ...(record.result === 'refused' ? { outcomeDesc: record.reason ?? 'refused' } : {}),
    entity,
  };
}

/**
 * A SMART consent, denial, refresh, code or refresh token reuse, or revocation; with the roles of
 * the user's groups, a `group` detail per group and a `capped` detail (the scopes they narrowed or
 * dropped).
 */
function authorizationEvent(record: AuthorizationEvent): Described {
  const details = [detail('action', record.action)];
  if (record.scopes?.length) details.push(detail('scope', record.scopes.join(' ')));
  for (const group of record.roles?.groups ?? []) details.push(detail('group', group));
  if (record.roles?.capped.length) details.push(detail('capped', record.roles.capped.join(' ')));
  const entity: AuditEventEntity[] = [
    {
      what: identified(IDENTIFIER_SYSTEMS.client, record.clientId, record.clientName),
      type: ENTITY_KIND.systemObject,
      role: ENTITY_ROLE.securityResource,
      detail: details,
    },
  ];
  if (record.patient !== undefined) entity.push(resourceEntity(`Patient/${record.patient}`));
  const alert = record.action === 'reuse' || record.action === 'revoke';
  return {
    type: alert ? EVENT_TYPE.securityAlert : EVENT_TYPE.userAuthentication,
    subtype: [alert ? EVENT_SUBTYPE.securityRolesChanged : EVENT_SUBTYPE.login],
    action: 'E',
    outcome: record.result === 'granted' ? '0' : '4',
    ...(record.result === 'refused'
      ? { outcomeDesc: record.reason === 'roles' ? ROLES_REFUSAL : AUTHORIZATION_REFUSALS[record.action] }
      : {}),
    entity,
  };
}

/** A request refused (401, 403, …), counted together when repeated. */
function refusedEvent(record: RefusedEvent): Described {
  const entity: AuditEventEntity[] = [];
  if (record.reference !== undefined) entity.push(resourceEntity(record.reference));
  const details = [detail('status', record.status)];
  if (record.pathLength !== undefined) details.push(detail('truncated', record.pathLength));
  details.push(...repeatedDetails(record.repeated));
  entity.push({
    type: ENTITY_KIND.systemObject,
    role: ENTITY_ROLE.securityResource,
    description: `${record.method.toUpperCase()} ${record.path}${record.pathLength !== undefined ? '…' : ''}`,
    detail: details,
  });
  return {
    type: EVENT_TYPE.securityAlert,
    subtype: [EVENT_SUBTYPE.useOfRestrictedFunction],
    action: actionOfMethod(record.method, record.path),
    outcome: '4',
    outcomeDesc: record.reason ?? `refused with ${record.status}`,
    entity,
  };
}

/** The codes, action, outcome and entities of one event, by its kind. */
export function describeEvent(record: AuditRecord): Described {
  switch (record.kind) {
    case 'token':
      return tokenEvent(record);
    case 'scim-user':
      return scimUserEvent(record);
    case 'project-init':
      return projectInitEvent(record);
    case 'client':
      return clientEvent(record);
    case 'fhir-write':
      return fhirWriteEvent(record);
    case 'fhir-access':
      return fhirAccessEvent(record);
    case 'export':
      return exportEvent(record);
    case 'import':
      return importEvent(record);
    case 'download':
      return downloadEvent(record);
    case 'sign-in':
      return signInEvent(record);
    case 'authorization':
      return authorizationEvent(record);
    case 'refused':
      return refusedEvent(record);
  }
}
