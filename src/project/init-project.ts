/**
 * `Project/$init`: creates a new, empty project with its admin user, all or nothing.
 * See docs/project-init.md.
 */
import { randomUUID } from 'node:crypto';
import type {
  MembershipRecord,
  ProjectRecord,
  ProjectScimSettings,
  Storage,
  StoredResource,
  UserRecord,
} from '../storage/types.js';
import { invalidParameter, readParameters } from '../http/fhir-parameters.js';
import { readScimSettings, SETTINGS_PARAMETERS } from './project-settings.js';

/** The input parameters of `$init`. */
export const INIT_PARAMETERS = {
  name: { type: 'string', required: true },
  ownerEmail: { type: 'string' },
  ownerGivenName: { type: 'string' },
  ownerFamilyName: { type: 'string' },
  ...SETTINGS_PARAMETERS,
} as const;

/** What `$init` was asked to create. */
export interface InitProjectInput {
  /** The project name. */
  name: string;
  ownerEmail?: string;
  ownerGivenName?: string;
  ownerFamilyName?: string;
  /** The project's SCIM settings (`scimDefaultUserType`, `scimEchoUserName`), when any is given. */
  scim?: ProjectScimSettings;
}

/** Longest accepted project or person name, in characters. */
const MAX_NAME_LENGTH = 256;
// RFC 5321 §4.5.3.1.3 caps a forward path at 256 octets, 254 once the angle brackets go.
const MAX_EMAIL_LENGTH = 254;
// A pragmatic addr-spec check (RFC 5322 §3.4.1 without quoted local parts or domain literals).
const EMAIL_PATTERN =
  /^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;

/** Whether `text` looks like an e-mail address (`local@domain.tld`). */
export function isEmailAddress(text: string): boolean {
  return text.length <= MAX_EMAIL_LENGTH && EMAIL_PATTERN.test(text);
}

/**
 * Reads and checks the `$init` `Parameters` body; every problem is a 400 `FhirError` whose
 * `expression` points at it (see `readParameters`).
 */
export function parseInitParameters(body: unknown): InitProjectInput {
  const read = readParameters(body, INIT_PARAMETERS);
  const input: InitProjectInput = { name: read.name.value.trim() };
  if (input.name.length > MAX_NAME_LENGTH) {
    throw invalidParameter(
      read.name.expression,
      `The project name is longer than ${MAX_NAME_LENGTH} characters`,
    );
  }
  for (const key of ['ownerGivenName', 'ownerFamilyName'] as const) {
    const given = read[key];
    if (!given) continue;
    const value = given.value.trim();
    if (value.length > MAX_NAME_LENGTH) {
      throw invalidParameter(given.expression, `'${key}' is longer than ${MAX_NAME_LENGTH} characters`);
    }
    input[key] = value;
  }
  if (read.ownerEmail) {
    const email = read.ownerEmail.value.trim();
    if (!isEmailAddress(email))
      throw invalidParameter(read.ownerEmail.expression, "'ownerEmail' is not an e-mail address");
    input.ownerEmail = email;
  }
  const scim = readScimSettings(read);
  if (Object.keys(scim).length > 0) input.scim = scim;
  return input;
}

/** Defaults for the admin user taken from an existing user (the caller, when a user creates a project). */
export interface OwnerDefaults {
  userName?: string;
  email?: string;
  givenName?: string;
  familyName?: string;
}

function stringAt(value: unknown, key: string): string | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const found = (value as Record<string, unknown>)[key];
  return typeof found === 'string' && found.trim() !== '' ? found : undefined;
}

/** The owner defaults found in a stored user (SCIM `name` and primary or first `emails` value). */
export function ownerDefaultsFromUser(user: UserRecord): OwnerDefaults {
  const emails = Array.isArray(user.data.emails) ? (user.data.emails as unknown[]) : [];
  const primary = emails.find(
    (e) => typeof e === 'object' && e !== null && (e as { primary?: unknown }).primary === true,
  );
  const email = stringAt(primary ?? emails[0], 'value');
  return {
    userName: user.userName,
    ...(email && isEmailAddress(email) ? { email } : {}),
    ...(stringAt(user.data.name, 'givenName') ? { givenName: stringAt(user.data.name, 'givenName') } : {}),
    ...(stringAt(user.data.name, 'familyName') ? { familyName: stringAt(user.data.name, 'familyName') } : {}),
  };
}

/** Everything `$init` created. */
export interface InitProjectResult {
  project: ProjectRecord;
  user: UserRecord;
  membership: MembershipRecord;
  /** The admin's `Practitioner` profile, the only FHIR resource of the new project. */
  profile: StoredResource;
}

/**
 * The name of an admin user for whom neither the parameters nor the defaults give one: readable in
 * a user list, and present where identity providers' tests expect every listed user to have a
 * `name` (Okta's SCIM test reads the first user's `name.givenName` and `name.familyName`).
 */
export const DEFAULT_ADMIN_NAME = { givenName: 'Project', familyName: 'Administrator' } as const;

/**
 * Creates the project (`strictMode: true`), the admin's `Practitioner` profile, the admin `User`
 * and its admin membership, then records the user as the project owner, in one storage
 * transaction: if any step fails, nothing is left behind. Parameters win over `defaults`. The
 * user's `userName` is `ownerEmail`, else the default `userName`, else the e-mail, else the profile id;
 * without a given or family name from either, the user is named {@link DEFAULT_ADMIN_NAME}.
 */
export async function initProject(
  storage: Storage,
  input: InitProjectInput,
  defaults: OwnerDefaults = {},
): Promise<InitProjectResult> {
  const email = input.ownerEmail ?? defaults.email;
  let givenName = input.ownerGivenName ?? defaults.givenName;
  let familyName = input.ownerFamilyName ?? defaults.familyName;
  if (givenName === undefined && familyName === undefined) {
    ({ givenName, familyName } = DEFAULT_ADMIN_NAME);
  }
  const formatted = [givenName, familyName].filter((part) => part !== undefined).join(' ');

  return storage.transaction(async (tx) => {
    const created = await tx.createProject({
      id: randomUUID(),
      name: input.name,
      strictMode: true,
      ...(input.scim ? { scim: input.scim } : {}),
    });
    // The same shapes the SCIM mapping writes for a user's profile (an official name, the primary
    // e-mail ranked first), so SCIM reads and updates of the admin user stay consistent.
    const humanName = {
      ...(formatted ? { text: formatted } : {}),
      ...(familyName !== undefined ? { family: familyName } : {}),
      ...(givenName !== undefined ? { given: [givenName] } : {}),
    };
    const profile = await tx.createResource(created.id, {
      resourceType: 'Practitioner',
      active: true,
      ...(Object.keys(humanName).length > 0 ? { name: [{ use: 'official', ...humanName }] } : {}),
      ...(email !== undefined ? { telecom: [{ system: 'email', value: email, use: 'work', rank: 1 }] } : {}),
    });
    const user = await tx.createUser(created.id, {
      id: randomUUID(),
      projectId: created.id,
      userName: input.ownerEmail ?? defaults.userName ?? email ?? profile.id,
      userType: 'Practitioner',
      profileId: profile.id,
      active: true,
      data: {
        ...(formatted
          ? {
              name: {
                formatted,
                ...(familyName !== undefined ? { familyName } : {}),
                ...(givenName !== undefined ? { givenName } : {}),
              },
              displayName: formatted,
            }
          : {}),
        ...(email !== undefined ? { emails: [{ value: email, type: 'work', primary: true }] } : {}),
      },
    });
    const membership = await tx.createMembership(created.id, {
      projectId: created.id,
      userId: user.id,
      admin: true,
      profile: `Practitioner/${profile.id}`,
    });
    const project = await tx.updateProject(created.id, { ownerUserId: user.id });
    return { project, user, membership, profile };
  });
}
