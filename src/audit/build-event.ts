import { isIP } from 'node:net';
import type { AuditEventAgent, AuditEventResource } from './audit-event-resource.js';
import { AGENT_TYPE, APPLICATION_SERVER, IDENTIFIER_SYSTEMS } from './codes.js';
import type { AuditActor, AuditRecord } from './events.js';
import { describeEvent } from './event-descriptions.js';

/** Options of {@link buildAuditEvent}. */
export interface BuildAuditEventOptions {
  /** `source.site` and `source.observer.display`: the name of this server. */
  sourceName: string;
  /** The resource id (the trail assigns one, so that a replayed event is recognised). */
  id?: string;
}

/** The requesting agent: the client or user (its profile), its name, its network address. */
function agentOf(actor: AuditActor, address: string | undefined): AuditEventAgent {
  const agent: AuditEventAgent = {
    type: { coding: [actor.kind === 'user' ? AGENT_TYPE.humanUser : AGENT_TYPE.application] },
    requestor: true,
  };
  if (actor.kind === 'user' && actor.id !== undefined) {
    agent.who = {
      ...(actor.profile !== undefined ? { reference: actor.profile } : {}),
      identifier: { system: IDENTIFIER_SYSTEMS.user, value: actor.id },
    };
  } else if (actor.id !== undefined) {
    agent.who = { identifier: { system: IDENTIFIER_SYSTEMS.client, value: actor.id } };
  }
  if (actor.id !== undefined) agent.altId = actor.id;
  const name = actor.name ?? (actor.kind === 'anonymous' ? 'unauthenticated caller' : undefined);
  if (name !== undefined) agent.name = name;
  if (address !== undefined && address !== '') {
    agent.network = { address, type: isIP(address) === 0 ? '1' : '2' };
  }
  return agent;
}

/**
 * Builds the R4 `AuditEvent` of one event: `type` / `subtype` from DICOM and FHIR
 * `restful-interaction`, `action`, `recorded`, `outcome`, the requesting `agent` (client or user,
 * with its network address), `source` (this server) and the `entity` list (resources, the query
 * base64-encoded, the export job, file details); refusals counted together carry their `period`
 * and a `count` detail. See docs/audit-events.md for one example per kind.
 * @see https://hl7.org/fhir/R4/auditevent.html
 */
export function buildAuditEvent(record: AuditRecord, options: BuildAuditEventOptions): AuditEventResource {
  const described = describeEvent(record);
  const repeated = record.kind === 'token' || record.kind === 'refused' ? record.repeated : undefined;
  const event: AuditEventResource = {
    resourceType: 'AuditEvent',
    ...(options.id !== undefined ? { id: options.id } : {}),
    type: described.type,
    ...(described.subtype.length > 0 ? { subtype: described.subtype } : {}),
    action: described.action,
    ...(repeated !== undefined
      ? { period: { start: repeated.first.toISOString(), end: repeated.last.toISOString() } }
      : {}),
    recorded: (record.recorded ?? new Date()).toISOString(),
    outcome: described.outcome,
    ...(described.outcomeDesc !== undefined ? { outcomeDesc: described.outcomeDesc } : {}),
    agent: [agentOf(record.actor, record.address)],
    source: {
      site: options.sourceName,
      observer: { display: options.sourceName },
      type: [APPLICATION_SERVER],
    },
  };
  if (described.entity.length > 0) event.entity = described.entity;
  return event;
}
