import type { Storage } from '../storage/types.js';

/**
 * How a SMART user's view of the store (`scopedStorage`) answers one member of `Storage`:
 * - `'checked'`: the view's own version, which applies the user's limits;
 * - `{ passes }`: the store's member unchanged, for the reason given (it holds no patient data);
 * - `{ refused }`: reading it throws, for the reason given (no FHIR data route needs it through
 *   the view, and it would reach past the user's patients).
 */
export type ScopedMemberRule = 'checked' | { readonly passes: string } | { readonly refused: string };

const ADMINISTRATION = { refused: 'administration (projects, $init), never reached through a user view' };
const DIRECTORY = {
  refused: 'the user and client directory (SCIM, client registration), not FHIR data of the user',
};
const CREDENTIALS = { refused: 'credentials of the authorization server, never a data route' };
const EXPORTS = {
  refused: 'bulk export reads and jobs, unlimited by the view: the bulk router applies its own limits',
};

/**
 * Every member of `Storage`, classified once. `satisfies Record<keyof Storage, …>` makes the
 * compiler refuse a `Storage` member added without a rule here, so a new method cannot pass
 * through a user's view unchecked; at run time the view refuses anything not listed (an adapter's
 * own members, say).
 */
export const SCOPED_MEMBER_RULES = {
  createProject: ADMINISTRATION,
  readProject: { passes: "the project's own settings (strict mode), no patient data" },
  updateProject: ADMINISTRATION,
  deleteProject: ADMINISTRATION,
  listProjects: ADMINISTRATION,

  createUser: DIRECTORY,
  readUser: DIRECTORY,
  updateUser: DIRECTORY,
  deleteUser: DIRECTORY,
  findUsers: DIRECTORY,
  listUsers: DIRECTORY,
  createMembership: DIRECTORY,
  listMemberships: DIRECTORY,
  deleteMembership: DIRECTORY,
  createClient: DIRECTORY,
  readClient: DIRECTORY,
  listClients: DIRECTORY,
  updateClient: DIRECTORY,

  createResource: 'checked',
  readResource: 'checked',
  updateResource: 'checked',
  deleteResource: 'checked',
  writeResources: 'checked',
  searchResources: 'checked',
  readResourceVersion: 'checked',
  readHistory: 'checked',
  compartmentTypes: 'checked',
  transaction: 'checked',

  listSigningKeys: CREDENTIALS,
  saveSigningKey: CREDENTIALS,
  useOnce: CREDENTIALS,
  failureCounts: CREDENTIALS,
  grants: CREDENTIALS,

  createExportJob: EXPORTS,
  readExportJob: EXPORTS,
  updateExportJob: EXPORTS,
  deleteExportJob: EXPORTS,
  listExportJobs: EXPORTS,
  exportSnapshot: EXPORTS,
  releaseSnapshot: EXPORTS,
  exportReader: EXPORTS,
  descriptor: { refused: 'reopens the store in a worker thread, outside the view' },
  exportFiles: EXPORTS,
  exportQueue: EXPORTS,

  ping: { passes: 'reachability only: reads and writes no record' },
  close: { refused: 'the host owns the store: a request never closes it' },
} as const satisfies Record<keyof Storage, ScopedMemberRule>;

/** The members the view implements itself, with the user's limits. */
export type CheckedMember = {
  [K in keyof typeof SCOPED_MEMBER_RULES]: (typeof SCOPED_MEMBER_RULES)[K] extends 'checked' ? K : never;
}[keyof typeof SCOPED_MEMBER_RULES];

/** The rule of `name`, or undefined when `Storage` has no such member. */
export function scopedMemberRule(name: string): ScopedMemberRule | undefined {
  return Object.hasOwn(SCOPED_MEMBER_RULES, name)
    ? SCOPED_MEMBER_RULES[name as keyof typeof SCOPED_MEMBER_RULES]
    : undefined;
}

/** Whether the view refuses a member of this rule (undefined: no member of the contract). */
export function isRefused(
  rule: ScopedMemberRule | undefined,
): rule is { readonly refused: string } | undefined {
  return rule === undefined || (typeof rule === 'object' && 'refused' in rule);
}
