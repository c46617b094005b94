import { canAccess } from '../auth/access/access.js';
import type { DataAccess, PatientLimit } from '../auth/access/data-access.js';
import type { Principal } from '../http/principal.js';
import { patientCompartmentTypes } from '../fhir/compartment.js';
import { R4_RESOURCE_TYPES } from '../common/resource-types.js';
import { FhirError, type FhirIssueCode } from '../http/http-error.js';
import { NotFoundError } from '../storage/errors.js';
import type { StorageOperations } from '../storage/types.js';
import type { ExportPlan } from './export-job-types.js';
import { resolveGroupMembers } from './group-members.js';
import type { ExportParams, KickoffIssue } from './kickoff-params.js';

/** True when `principal` may export (and download) resources of `resourceType`. */
export function canExport(principal: Principal, resourceType: string): boolean {
  return canAccess(principal, resourceType, 'read') || canAccess(principal, resourceType, 'search');
}

/**
 * Turns parsed kick-off parameters into what the job runs: the resource types (narrowed to
 * `_type`, to the patient compartment at Patient and Group level, and to what the caller's scopes
 * cover), and the patients of a Group or of the `patient` parameter.
 *
 * Bulk Data 2.0.0 asks for an error only when nothing of what was asked can be exported, so these
 * are reported in the manifest's `error` files and the rest is exported: a `_type` outside the
 * patient compartment at Patient and Group level (400 when every `_type` is outside it, unless
 * lenient), a `patient` that does not exist or is not in the Group.
 *
 * Errors: 403 when the scopes cover none of the types (or, unless lenient, one that `_type` names,
 * or Provenance when `includeAssociatedData` is given); 404 for an unknown Group.
 *
 * A SMART user (`access`, see src/auth/data-access.ts) exports at Patient and Group level only (403
 * at system level), of a Group it may read (404 otherwise), and only the compartments of the
 * patients it may see: the `patient` parameter and the Group's members are narrowed to them (others
 * are left out without a word, as if they did not exist), and without either the export holds
 * exactly those patients. Limited to some patients, it may not ask for `includeAssociatedData` (403,
 * or left out when lenient): Provenance is not narrowed to them.
 */
export async function planExport(
  storage: Pick<StorageOperations, 'readResource'>,
  projectId: string,
  principal: Principal,
  params: ExportParams,
  issues: KickoffIssue[],
  access?: DataAccess,
): Promise<ExportPlan> {
  const lenient = params.lenient;
  if (access && params.level === 'system')
    throw new FhirError(403, 'forbidden', 'A user token exports at Patient or Group level only');
  const allIssues = [...issues];
  const reject = (status: number, code: FhirIssueCode, parameter: string, text: string): void => {
    if (!lenient) throw new FhirError(status, code, text, { expression: [parameter] });
    allIssues.push({ severity: 'warning', code, text, expression: [parameter] });
  };

  // Output organized by patient holds patient compartments only, at every level.
  const compartmentTypes =
    params.level === 'system' && !params.organizeOutputBy
      ? undefined
      : new Set(['Patient', ...patientCompartmentTypes()]);
  /** Reported in the error files, whatever the handling: the export goes on without it. */
  const report = (code: string, parameter: string, text: string): void => {
    allIssues.push({ severity: 'warning', code, text, expression: [parameter] });
  };

  let types: string[];
  if (params.types) {
    types = [];
    const outside = compartmentTypes ? params.types.filter((type) => !compartmentTypes.has(type)) : [];
    if (!lenient && outside.length > 0 && outside.length === params.types.length) {
      throw new FhirError(400, 'not-supported', `${outside.join(', ')}: not in the patient compartment`, {
        expression: ['_type'],
      });
    }
    for (const type of outside) report('not-supported', '_type', `${type} is not in the patient compartment`);
    for (const type of params.types) {
      if (outside.includes(type)) continue;
      if (!canExport(principal, type)) {
        reject(403, 'forbidden', '_type', `The access token does not cover ${type}`);
      } else types.push(type);
    }
  } else {
    const all = compartmentTypes ? [...compartmentTypes] : [...R4_RESOURCE_TYPES];
    types = all.filter((type) => canExport(principal, type));
    if (types.length === 0) throw new FhirError(403, 'forbidden', 'The access token covers no resource type');
  }

  const plan: ExportPlan = { params, types, issues: allIssues };
  if (params.organizeOutputBy && !canExport(principal, 'Patient')) {
    // The blocks are the patients': their files are downloaded as Patient data.
    reject(403, 'forbidden', 'organizeOutputBy', 'organizeOutputBy=Patient needs access to Patient');
    const { organizeOutputBy: _dropped, ...rest } = plan.params;
    plan.params = rest;
  }
  const reach = access ? await exportReach(access, types) : undefined;
  if (params.associatedData && (!canExport(principal, 'Provenance') || reach !== undefined)) {
    reject(403, 'forbidden', 'includeAssociatedData', 'The access token does not cover Provenance');
    const { associatedData: _dropped, ...rest } = plan.params;
    plan.params = rest;
  }
  if (params.level === 'group') {
    if (params.groupId === undefined) throw new FhirError(400, 'invalid', 'A Group export needs a Group id');
    // A Group the user may not read is not there for it (404, as its read).
    if (
      access &&
      !(await access.permits(await storage.readResource(projectId, 'Group', params.groupId), 'read'))
    )
      throw new NotFoundError(`Group/${params.groupId} not found`);
    const members = await resolveGroupMembers(storage, projectId, params.groupId, params.sinceMs);
    let patientIds = members.patientIds;
    if (params.patients) {
      const inGroup = new Set(patientIds);
      const wanted: string[] = [];
      for (const id of params.patients) {
        if (inGroup.has(id)) wanted.push(id);
        else report('not-found', 'patient', `Patient/${id} is not a member of the Group`);
      }
      patientIds = wanted;
    }
    if (reach) patientIds = patientIds.filter((id) => reach.includes(id));
    const chosen = new Set(patientIds);
    plan.patientIds = patientIds;
    const added = members.addedSince.filter((id) => chosen.has(id));
    if (added.length > 0) plan.newPatientIds = added;
  } else if (params.level === 'patient' && params.patients) {
    const found: string[] = [];
    for (const id of params.patients) {
      try {
        if (reach && !reach.includes(id)) throw new NotFoundError(`Patient/${id} not found`);
        await storage.readResource(projectId, 'Patient', id);
        found.push(id);
      } catch (error) {
        if (!(error instanceof NotFoundError)) throw error;
        report('not-found', 'patient', `Patient/${id} does not exist`);
      }
    }
    plan.patientIds = found;
  } else if (params.level === 'patient' && reach) {
    plan.patientIds = [...reach];
  }
  return plan;
}

/**
 * The patients a SMART user's export may hold: those every exported type reaches (a type whose
 * scope reaches the whole project does not narrow); undefined when none narrows.
 */
async function exportReach(access: DataAccess, types: readonly string[]): Promise<PatientLimit> {
  let reach: PatientLimit;
  for (const type of types) {
    const read = await access.limit(type, 'read');
    const search = await access.limit(type, 'search');
    // What the type's read or search reaches (`canExport` asks for either).
    const limit = read === undefined || search === undefined ? undefined : [...new Set([...read, ...search])];
    if (limit === undefined) continue;
    reach = reach === undefined ? limit : reach.filter((id) => limit.includes(id));
  }
  return reach;
}
