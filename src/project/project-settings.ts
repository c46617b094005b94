/**
 * A project's own settings (how its SCIM API treats identity providers, given to `Project/$init`;
 * its OpenID Connect identity provider, the roles of its SCIM Groups and the servers its `$import`
 * pulls from), changed later with `Project/{id}/$settings`. See docs/project-init.md and
 * docs/login.md.
 */
import { USER_TYPES } from '../scim/schema.js';
import type { ProjectGroupRole, ProjectRecord, ProjectScimSettings, Storage } from '../storage/types.js';
import { GROUP_ROLE_PARAMETERS, GROUP_ROLES_RESET, readGroupRoles } from './group-role-settings.js';
import {
  applyIdentityProviderChange,
  IDENTITY_PROVIDER_PARAMETERS,
  IDENTITY_PROVIDER_RESET,
  readIdentityProviderChange,
  type IdentityProviderChange,
} from './identity-provider-settings.js';
import {
  applyImportSources,
  IMPORT_SOURCE_PARAMETERS,
  IMPORT_SOURCES_RESET,
  readImportSources,
  type ImportSourceRules,
  type ImportSourceChange,
} from './import-source-settings.js';
import { invalidParameter, readParameters, type ParameterValue } from '../http/fhir-parameters.js';

/** The settings parameters, shared by `$init` and `$settings`. */
export const SETTINGS_PARAMETERS = {
  scimDefaultUserType: { type: ['code', 'string'] },
  scimEchoUserName: { type: 'boolean' },
} as const;

/** The input parameters of `$settings`: the settings, and `reset` naming settings to clear. */
export const SETTINGS_OPERATION_PARAMETERS = {
  ...SETTINGS_PARAMETERS,
  ...IDENTITY_PROVIDER_PARAMETERS,
  ...GROUP_ROLE_PARAMETERS,
  ...IMPORT_SOURCE_PARAMETERS,
  reset: { type: ['code', 'string'], repeats: true },
} as const;

type SettingName = keyof typeof SETTINGS_PARAMETERS;

/** Where each setting lives in `ProjectScimSettings`. */
const SCIM_KEYS: Record<SettingName, keyof ProjectScimSettings> = {
  scimDefaultUserType: 'defaultUserType',
  scimEchoUserName: 'echoUserName',
};

/** The SCIM settings among read parameters; 400 for a `scimDefaultUserType` that is no profile type. */
export function readScimSettings(read: {
  scimDefaultUserType?: ParameterValue<string> | undefined;
  scimEchoUserName?: ParameterValue<boolean> | undefined;
}): ProjectScimSettings {
  const settings: ProjectScimSettings = {};
  const type = read.scimDefaultUserType;
  if (type) {
    const found = USER_TYPES.find((t) => t === type.value);
    if (!found) {
      throw invalidParameter(
        type.expression,
        `'scimDefaultUserType' must be one of ${USER_TYPES.join(', ')}`,
      );
    }
    settings.defaultUserType = found;
  }
  if (read.scimEchoUserName) settings.echoUserName = read.scimEchoUserName.value;
  return settings;
}

/** What a `$settings` call asks for. */
export interface SettingsChange {
  /** Settings to set. */
  scim: ProjectScimSettings;
  /** Settings to clear (they follow the router option again). */
  reset: (keyof ProjectScimSettings)[];
  /** Identity provider fields to set (`idp*` parameters). */
  identityProvider: IdentityProviderChange;
  /** Remove the identity provider (`reset` `identityProvider`). */
  resetIdentityProvider: boolean;
  /** The groups' roles in place of the stored ones (`groupRole` parameters), when given. */
  groupRoles?: ProjectGroupRole[];
  /** Remove every role (`reset` `groupRoles`). */
  resetGroupRoles: boolean;
  /** Import sources to add, or to replace the stored ones of the same `url` (`importSource` parameters). */
  importSources: ImportSourceChange[];
  /** Remove every import source (`reset` `importSources`). */
  resetImportSources: boolean;
}

/** Reads and checks the `$settings` `Parameters` body (400 with an `expression` for every problem). */
export function parseSettingsParameters(
  body: unknown,
  sources: ImportSourceRules = { allowPrivateAddresses: true },
): SettingsChange {
  const read = readParameters(body, SETTINGS_OPERATION_PARAMETERS);
  const groupRoles = readGroupRoles(read.groupRole);
  const change: SettingsChange = {
    scim: readScimSettings(read),
    reset: [],
    identityProvider: readIdentityProviderChange(read),
    resetIdentityProvider: false,
    ...(groupRoles ? { groupRoles } : {}),
    resetGroupRoles: false,
    importSources: readImportSources(read.importSource, sources),
    resetImportSources: false,
  };
  for (const item of read.reset) {
    if (item.value === GROUP_ROLES_RESET) {
      if (groupRoles) throw invalidParameter(item.expression, `'${GROUP_ROLES_RESET}' is both set and reset`);
      change.resetGroupRoles = true;
      continue;
    }
    if (item.value === IMPORT_SOURCES_RESET) {
      if (change.importSources.length > 0)
        throw invalidParameter(item.expression, `'${IMPORT_SOURCES_RESET}' is both set and reset`);
      change.resetImportSources = true;
      continue;
    }
    if (item.value === IDENTITY_PROVIDER_RESET) {
      if (Object.keys(change.identityProvider).length > 0)
        throw invalidParameter(item.expression, `'${IDENTITY_PROVIDER_RESET}' is both set and reset`);
      change.resetIdentityProvider = true;
      continue;
    }
    if (!Object.hasOwn(SCIM_KEYS, item.value)) {
      const names = [
        ...Object.keys(SCIM_KEYS),
        IDENTITY_PROVIDER_RESET,
        GROUP_ROLES_RESET,
        IMPORT_SOURCES_RESET,
      ].join(', ');
      throw invalidParameter(item.expression, `'reset' must name a setting: ${names}`);
    }
    const name = item.value as SettingName;
    if (read[name]) throw invalidParameter(item.expression, `'${name}' is both set and reset`);
    change.reset.push(SCIM_KEYS[name]);
  }
  return change;
}

/**
 * Applies `change` to the project's settings in one transaction, so concurrent calls never lose
 * each other's settings. Settings the change does not name are kept.
 */
export function updateProjectSettings(
  storage: Storage,
  projectId: string,
  change: SettingsChange,
): Promise<ProjectRecord> {
  return storage.transaction(async (tx) => {
    const current = await tx.readProject(projectId);
    const scim: ProjectScimSettings = { ...current.scim, ...change.scim };
    for (const key of change.reset) delete scim[key];
    const identityProvider = change.resetIdentityProvider
      ? undefined
      : applyIdentityProviderChange(current.identityProvider, change.identityProvider, (text) =>
          invalidParameter('Parameters', text),
        );
    return tx.updateProject(projectId, {
      scim,
      identityProvider,
      groupRoles: groupRolesAfter(current, change),
      importSources: change.resetImportSources
        ? undefined
        : applyImportSources(current.importSources, change.importSources),
    });
  });
}

/** The roles once `change` applies: the new list, none after a reset, else the stored ones. */
function groupRolesAfter(current: ProjectRecord, change: SettingsChange): ProjectGroupRole[] | undefined {
  if (change.resetGroupRoles) return undefined;
  return change.groupRoles ?? current.groupRoles;
}
