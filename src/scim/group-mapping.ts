/**
 * SCIM Group <-> FHIR `Group`: a SCIM Group is stored as a FHIR `Group` of the project with the
 * same id, and nothing else.
 *
 * | SCIM              | FHIR `Group`                                                              |
 * | ----------------- | ------------------------------------------------------------------------- |
 * | `id`              | `id`                                                                      |
 * | `displayName`     | `name`, and `identifier` (`SCIM_GROUP_SYSTEMS.nameKey`) its lower case    |
 * | `externalId`      | `identifier` (`SCIM_GROUP_SYSTEMS.externalId`)                            |
 * | `members[]`       | `member[]`: `entity` the user's profile (`Patient/…`), `entity.display`,  |
 * |                   | the user id in an extension (`SCIM_GROUP_SYSTEMS.memberId`), `inactive`   |
 * |                   | while the user is, `period.start` when it joined                          |
 * | `meta.created`    | the first `meta.lastUpdated`, kept in `meta.extension` (`…created`)       |
 * | `meta.version`    | `meta.versionId` (`W/"3"`), `lastModified` = `meta.lastUpdated`           |
 *
 * with `type` `person`, `actual` true, `quantity` the number of members and `meta.tag`
 * `SCIM_MANAGED_TAG`. The lower-cased name as an identifier lets every store find a name with an
 * indexed token search (R4 defines no Group `name` search parameter): uniqueness checks and
 * `displayName eq` filters read one Group, not all of them.
 */
import { groupNameKey, SCIM_GROUP_NAME_SYSTEM, SCIM_MANAGED_TAG } from '../common/scim-managed.js';
import { ScimError } from '../http/http-error.js';
import type { FhirResource, StoredResource, UserRecord } from '../storage/types.js';
import { isPlainObject } from './json-access.js';
import { normalizeResource } from './normalize.js';
import { CORE_GROUP_SCHEMA_ID, GROUP_RESOURCE_SCHEMAS } from './schema.js';

/** The URIs under which a Group keeps what FHIR has no element for. */
export const SCIM_GROUP_SYSTEMS = {
  /** `identifier.system` of the SCIM `externalId`. */
  externalId: 'urn:fhir-platform-kit:scim-external-id',
  /** `identifier.system` of the lower-cased `displayName` (unique in the project). */
  nameKey: SCIM_GROUP_NAME_SYSTEM,
  /** `member.extension.url` of the member's SCIM user id (`valueString`). */
  memberId: 'urn:fhir-platform-kit:scim-member',
  /** `meta.extension.url` of when the group was created (`valueInstant`). */
  created: 'urn:fhir-platform-kit:scim-created',
} as const;

/** One member as a create, replace or PATCH result names it. */
export interface ScimMemberField {
  /** The SCIM id of a user of the project. */
  value: string;
  display?: string;
}

/** The attributes a create or replace writes, taken from a SCIM Group body. */
export interface ScimGroupFields {
  displayName: string;
  externalId?: string;
  /** Without duplicates (the first of a value wins), in the order given. */
  members: ScimMemberField[];
}

/** One `Group.member` this mapping writes. */
export interface GroupMemberEntry {
  [key: string]: unknown;
  extension: { url: string; valueString: string }[];
  entity: { reference: string; display?: string };
  period?: { start: string };
  inactive?: boolean;
}

function invalidValue(message: string): ScimError {
  return new ScimError(400, 'invalidValue', message);
}

/** The members of a normalized body: each with a `value`, users only, without duplicates. */
function memberFields(members: unknown): ScimMemberField[] {
  const out: ScimMemberField[] = [];
  const seen = new Set<string>();
  for (const member of Array.isArray(members) ? members : []) {
    if (!isPlainObject(member)) continue;
    const { value, display, type } = member;
    if (typeof value !== 'string' || value.trim() === '') throw invalidValue('Each member needs a value');
    if (typeof type === 'string' && type.toLowerCase() !== 'user')
      throw invalidValue(`Only users can be members (members.type ${JSON.stringify(type)})`);
    if (seen.has(value)) continue;
    seen.add(value);
    out.push({ value, ...(typeof display === 'string' && display !== '' ? { display } : {}) });
  }
  return out;
}

/**
 * Reads a SCIM Group body (POST, PUT, or a PATCH result) into fields: values normalized to the
 * schema, unknown and readOnly attributes dropped. 400 `invalidValue` without a `displayName`, for
 * a member without `value` or of a type other than `User`, or for a malformed value.
 */
export function scimGroupFields(body: unknown): ScimGroupFields {
  const normalized = normalizeResource(body, GROUP_RESOURCE_SCHEMAS);
  const displayName = typeof normalized.displayName === 'string' ? normalized.displayName.trim() : '';
  if (displayName === '') throw invalidValue('displayName is required');
  const externalId = typeof normalized.externalId === 'string' ? normalized.externalId : '';
  return {
    displayName,
    ...(externalId !== '' ? { externalId } : {}),
    members: memberFields(normalized.members),
  };
}

/** The SCIM user id a member entry carries, if any. */
export function memberUserId(member: unknown): string | undefined {
  if (!isPlainObject(member) || !Array.isArray(member.extension)) return undefined;
  for (const extension of member.extension as unknown[]) {
    if (
      isPlainObject(extension) &&
      extension.url === SCIM_GROUP_SYSTEMS.memberId &&
      typeof extension.valueString === 'string'
    )
      return extension.valueString;
  }
  return undefined;
}

/** The member entries of a stored Group. */
export function memberEntries(group: FhirResource): GroupMemberEntry[] {
  return Array.isArray(group.member) ? (group.member as GroupMemberEntry[]) : [];
}

/** The profile reference of a user (`Practitioner/…`): what `Group.member.entity` points at. */
export function profileReference(user: Pick<UserRecord, 'userType' | 'profileId'>): string {
  return `${user.userType}/${user.profileId}`;
}

/** A user's name for display: `displayName`, else `name.formatted`, else given and family names. */
function userDisplay(user: UserRecord): string | undefined {
  const { displayName, name } = user.data;
  if (typeof displayName === 'string' && displayName !== '') return displayName;
  if (!isPlainObject(name)) return undefined;
  if (typeof name.formatted === 'string' && name.formatted !== '') return name.formatted;
  const parts = [name.givenName, name.familyName].filter((p) => typeof p === 'string' && p !== '');
  return parts.length ? parts.join(' ') : undefined;
}

/**
 * The entry of a user joining a group at `since`: its profile, the display given (else the
 * user's name), `inactive` while the user is.
 */
export function newMemberEntry(
  user: UserRecord,
  display: string | undefined,
  since: string,
): GroupMemberEntry {
  const shown = display ?? userDisplay(user);
  return {
    extension: [{ url: SCIM_GROUP_SYSTEMS.memberId, valueString: user.id }],
    entity: { reference: profileReference(user), ...(shown !== undefined ? { display: shown } : {}) },
    period: { start: since },
    ...(user.active ? {} : { inactive: true }),
  };
}

/** The identifier value of `system` in a Group. */
function identifierValue(group: FhirResource, system: string): string | undefined {
  const identifiers = Array.isArray(group.identifier) ? (group.identifier as unknown[]) : [];
  const found = identifiers.find((i) => isPlainObject(i) && i.system === system);
  return isPlainObject(found) && typeof found.value === 'string' ? found.value : undefined;
}

/**
 * When the group was created: its `meta.extension`, which every version after the first carries,
 * else (the first version) its `meta.lastUpdated`, on the store's own clock.
 */
export function groupCreated(group: StoredResource): string {
  const extensions = Array.isArray(group.meta.extension) ? (group.meta.extension as unknown[]) : [];
  const found = extensions.find((e) => isPlainObject(e) && e.url === SCIM_GROUP_SYSTEMS.created);
  return isPlainObject(found) && typeof found.valueInstant === 'string'
    ? found.valueInstant
    : group.meta.lastUpdated;
}

/** The `meta` of a new group, or of the next version of `replacing`. */
function groupMeta(replacing?: StoredResource): Record<string, unknown> {
  const created = replacing
    ? { extension: [{ url: SCIM_GROUP_SYSTEMS.created, valueInstant: groupCreated(replacing) }] }
    : {};
  return { tag: [{ ...SCIM_MANAGED_TAG }], ...created };
}

/** The next version of `group` with `members` for its member list, all else kept. */
export function groupWithMembers(
  group: StoredResource,
  members: GroupMemberEntry[],
): FhirResource & { id: string } {
  const { meta: _meta, member: _member, quantity: _quantity, ...rest } = group;
  return {
    ...rest,
    meta: groupMeta(group),
    quantity: members.length,
    ...(members.length ? { member: members } : {}),
  };
}

/**
 * The FHIR Group of a SCIM Group: `fields` and the member entries (`members`, in order). A new
 * group (no `replacing`) has no id yet (the store gives it one) and no creation time (its first
 * `meta.lastUpdated` is); a next version keeps the id and creation time of the one it replaces.
 */
export function groupResource(
  fields: Pick<ScimGroupFields, 'displayName' | 'externalId'>,
  members: GroupMemberEntry[],
  replacing?: StoredResource,
): FhirResource {
  const identifier = [
    { system: SCIM_GROUP_SYSTEMS.nameKey, value: groupNameKey(fields.displayName) },
    ...(fields.externalId !== undefined
      ? [{ system: SCIM_GROUP_SYSTEMS.externalId, value: fields.externalId }]
      : []),
  ];
  return {
    resourceType: 'Group',
    ...(replacing ? { id: replacing.id } : {}),
    meta: groupMeta(replacing),
    identifier,
    active: true,
    type: 'person',
    actual: true,
    name: fields.displayName,
    quantity: members.length,
    ...(members.length ? { member: members } : {}),
  };
}

/** The `meta.version` and ETag of a Group: a weak validator of its FHIR version (RFC 7644 §3.14). */
export function groupEtag(group: StoredResource): string {
  return `W/"${group.meta.versionId}"`;
}

/** The version number of a stored Group, as `If-Match` names versions. */
export function groupVersion(group: StoredResource): number {
  return Number(group.meta.versionId);
}

export interface ScimGroupRenderOptions {
  /** Absolute URL of the group (`meta.location`). */
  location: string;
  /** Absolute URL of a user (`members.$ref`). */
  userUrl: (id: string) => string;
}

/** The SCIM document of a stored Group: what PATCH operates on, filters test, and answers carry. */
export function groupToScim(group: StoredResource, options: ScimGroupRenderOptions): Record<string, unknown> {
  const externalId = identifierValue(group, SCIM_GROUP_SYSTEMS.externalId);
  const members: Record<string, unknown>[] = [];
  for (const entry of memberEntries(group)) {
    const value = memberUserId(entry);
    if (value === undefined) continue;
    const display = entry.entity?.display;
    members.push({
      value,
      $ref: options.userUrl(value),
      ...(typeof display === 'string' ? { display } : {}),
      type: 'User',
    });
  }
  return {
    schemas: [CORE_GROUP_SCHEMA_ID],
    id: group.id,
    ...(externalId !== undefined ? { externalId } : {}),
    displayName: typeof group.name === 'string' ? group.name : '',
    ...(members.length ? { members } : {}),
    meta: {
      resourceType: 'Group',
      created: groupCreated(group),
      lastModified: group.meta.lastUpdated,
      location: options.location,
      version: groupEtag(group),
    },
  };
}
