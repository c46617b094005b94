/**
 * SCIM User <-> `UserRecord` and the linked FHIR profile resource.
 *
 * A user's SCIM attributes are kept in three places of the record: `userName`, `externalId`,
 * `active` and `userType` in their own fields, everything else (`name`, `emails`, `displayName`,
 * the enterprise extension, …) canonicalized in `data`. The profile resource of type `userType`
 * carries the user's name (`HumanName`) and email addresses (`ContactPoint` with system `email`).
 */
import { ScimError } from '../http/http-error.js';
import type { FhirResource, ProfileType, UserRecord } from '../storage/types.js';
import { isPlainObject, setOwn } from './json-access.js';
import { normalizeResource } from './normalize.js';
import {
  CORE_USER_SCHEMA_ID,
  ENTERPRISE_USER_SCHEMA_ID,
  USER_RESOURCE_SCHEMAS,
  USER_TYPES,
  type ScimResourceSchemas,
} from './schema.js';

/** The attributes a create or replace writes, taken from a SCIM User body. */
export interface ScimUserFields {
  /** Absent when the body carries none (the profile id then becomes the stored userName). */
  userName?: string;
  externalId?: string;
  /** Absent when the body does not say (create then defaults to true, replace keeps the current value). */
  active?: boolean;
  userType: ProfileType;
  data: Record<string, unknown>;
}

/** Fields with their own place in `UserRecord`; the rest of the canonical body goes to `data`. */
const OWN_FIELDS = new Set(['id', 'meta', 'userName', 'externalId', 'active', 'userType', 'schemas']);

function canonicalUserType(value: unknown): ProfileType | undefined {
  if (typeof value !== 'string') return undefined;
  return USER_TYPES.find((t) => t.toLowerCase() === value.trim().toLowerCase());
}

/**
 * Reads a SCIM User body (POST, PUT, or a PATCH result) into record fields: values normalized to
 * the schema, unknown and readOnly attributes dropped. A body without `userType` (absent, null or
 * blank) takes `fallbackUserType`. 400 `invalidValue` for a missing (without fallback) or unknown
 * `userType` or a malformed value.
 */
export function scimUserFields(
  body: unknown,
  schemas: ScimResourceSchemas = USER_RESOURCE_SCHEMAS,
  fallbackUserType?: ProfileType,
): ScimUserFields {
  const normalized = normalizeResource(body, schemas);
  const given = normalized.userType;
  const absent = given === undefined || (typeof given === 'string' && given.trim() === '');
  const userType = absent && fallbackUserType ? fallbackUserType : canonicalUserType(given);
  if (!userType) {
    throw new ScimError(400, 'invalidValue', `userType must be one of ${USER_TYPES.join(', ')}`);
  }
  const userName = typeof normalized.userName === 'string' ? normalized.userName.trim() : undefined;
  const externalId = typeof normalized.externalId === 'string' ? normalized.externalId : undefined;
  const data: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(normalized)) if (!OWN_FIELDS.has(key)) setOwn(data, key, value);
  return {
    ...(userName ? { userName } : {}),
    ...(externalId !== undefined && externalId !== '' ? { externalId } : {}),
    ...(typeof normalized.active === 'boolean' ? { active: normalized.active } : {}),
    userType,
    data,
  };
}

/** The `meta.version` and ETag of a record: a weak validator of its version (RFC 7644 §3.14). */
export function userEtag(record: Pick<UserRecord, 'version'>): string {
  return `W/"${record.version}"`;
}

export interface ScimUserRenderOptions {
  /** Absolute URL of the user (`meta.location`). */
  location: string;
  /** Answer the stored `userName` instead of the profile id. */
  echoUserName: boolean;
}

/**
 * The SCIM document of a user with its stored `userName`: what PATCH operates on and what
 * `scimUserFields` reads back.
 */
export function userDocument(record: UserRecord, location: string, clone = true): Record<string, unknown> {
  const hasEnterprise = isPlainObject(record.data[ENTERPRISE_USER_SCHEMA_ID]);
  return {
    schemas: hasEnterprise ? [CORE_USER_SCHEMA_ID, ENTERPRISE_USER_SCHEMA_ID] : [CORE_USER_SCHEMA_ID],
    id: record.id,
    ...(record.externalId !== undefined ? { externalId: record.externalId } : {}),
    userName: record.userName,
    userType: record.userType,
    active: record.active,
    ...(clone ? structuredClone(record.data) : record.data),
    meta: {
      resourceType: 'User',
      created: record.createdAt,
      lastModified: record.updatedAt,
      location,
      version: userEtag(record),
    },
  };
}

/**
 * The SCIM User a response carries: `userName` is the id of the linked FHIR profile, or the stored
 * name with `echoUserName`.
 */
export function userToScim(record: UserRecord, options: ScimUserRenderOptions): Record<string, unknown> {
  const doc = userDocument(record, options.location);
  if (!options.echoUserName) doc.userName = record.profileId;
  return doc;
}

/**
 * The document filters are evaluated on: `userName` holds both the stored name and the profile
 * id, so `userName eq "…"` finds a user by either.
 */
export function userFilterView(record: UserRecord, location: string): Record<string, unknown> {
  // Read-only use: no copy of `data`.
  const doc = userDocument(record, location, false);
  doc.userName = record.userName === record.profileId ? record.userName : [record.userName, record.profileId];
  return doc;
}

/** The FHIR `HumanName` list for a SCIM `name` (and `displayName` when no name part is given). */
function humanNames(data: Record<string, unknown>): Record<string, unknown>[] | undefined {
  const name = isPlainObject(data.name) ? data.name : {};
  const text = typeof name.formatted === 'string' ? name.formatted : undefined;
  const family = typeof name.familyName === 'string' ? name.familyName : undefined;
  const given = [name.givenName, name.middleName].filter(
    (v): v is string => typeof v === 'string' && v !== '',
  );
  const prefix = typeof name.honorificPrefix === 'string' ? [name.honorificPrefix] : [];
  const suffix = typeof name.honorificSuffix === 'string' ? [name.honorificSuffix] : [];
  const display = typeof data.displayName === 'string' ? data.displayName : undefined;
  const human: Record<string, unknown> = {};
  if (text ?? display) human.text = text ?? display;
  if (family) human.family = family;
  if (given.length) human.given = given;
  if (prefix.length) human.prefix = prefix;
  if (suffix.length) human.suffix = suffix;
  return Object.keys(human).length ? [{ use: 'official', ...human }] : undefined;
}

/** FHIR `ContactPoint`s for SCIM `emails`. */
function emailContacts(data: Record<string, unknown>): Record<string, unknown>[] {
  const emails = Array.isArray(data.emails) ? data.emails : [];
  const out: Record<string, unknown>[] = [];
  for (const email of emails) {
    if (!isPlainObject(email) || typeof email.value !== 'string') continue;
    const contact: Record<string, unknown> = { system: 'email', value: email.value };
    if (email.type === 'work' || email.type === 'home') contact.use = email.type;
    if (email.primary === true) contact.rank = 1;
    out.push(contact);
  }
  return out;
}

/**
 * The profile resource for a user: `existing` (when given) with its name and email contact points
 * replaced from the SCIM data; other elements (phones, identifiers, …) are kept.
 */
export function profileResource(
  userType: ProfileType,
  data: Record<string, unknown>,
  existing?: FhirResource,
): FhirResource {
  const resource: FhirResource = existing
    ? { ...structuredClone(existing), resourceType: userType }
    : { resourceType: userType };
  delete resource.meta;
  const names = humanNames(data);
  if (names) resource.name = names;
  else delete resource.name;
  const others: unknown[] = Array.isArray(resource.telecom)
    ? (resource.telecom as unknown[]).filter((t) => !(isPlainObject(t) && t.system === 'email'))
    : [];
  const telecom = [...others, ...emailContacts(data)];
  if (telecom.length) resource.telecom = telecom;
  else delete resource.telecom;
  return resource;
}

/** True when two profile renderings differ in what the mapping controls. */
export function profileChanged(before: FhirResource, after: FhirResource): boolean {
  return JSON.stringify([before.name, before.telecom]) !== JSON.stringify([after.name, after.telecom]);
}
