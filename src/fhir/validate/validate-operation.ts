import type { ResourceAction } from '../../auth/access/access.js';
import { isScimManaged } from '../../common/scim-managed.js';
import { FhirError } from '../../http/http-error.js';
import { outcomeOf, type OperationOutcome, type OutcomeIssue } from '../../http/outcome.js';
import { NotFoundError } from '../../storage/errors.js';
import type { FhirResource } from '../../storage/types.js';
import type { FhirContext } from '../context.js';
import { authorize } from '../interactions.js';
import { checkId, checkResource, checkType } from '../resource-checks.js';

/** The modes of `$validate`. @see https://hl7.org/fhir/R4/valueset-resource-validation-mode.html */
export type ValidationMode = 'create' | 'update' | 'delete';

/** What a `$validate` request asks, its transport (URL, body, query) read. */
export interface ValidateRequest {
  type: string;
  /** The instance of `[type]/[id]/$validate`. */
  id?: string;
  /** The resource to validate (a POST's body, or its `resource` parameter); absent: the stored one (GET). */
  resource?: unknown;
  mode?: string;
  profile?: string;
}

const BASE_PROFILE = 'http://hl7.org/fhir/StructureDefinition/';
const MODES: ReadonlySet<string> = new Set(['create', 'update', 'delete']);

const issue = (
  severity: OutcomeIssue['severity'],
  code: string,
  text: string,
  expression?: string,
): OutcomeIssue => ({
  severity,
  code,
  details: { text },
  ...(expression ? { expression: [expression] } : {}),
});

/** The access `$validate` needs: that of the write it rehearses; a GET of the stored resource also reads. */
function actionsOf(request: ValidateRequest, mode: ValidationMode | undefined): ResourceAction[] {
  const write: ResourceAction = mode ?? (request.id === undefined ? 'create' : 'update');
  return request.resource === undefined ? ['read', ...(mode ? [write] : [])] : [write];
}

/** 400 `not-supported` for a profile other than the R4 base profile of `type`. */
function checkProfile(type: string, profile: string | undefined): void {
  if (profile === undefined) return;
  const canonical = profile.split('|')[0];
  if (canonical !== `${BASE_PROFILE}${type}`) {
    throw new FhirError(
      400,
      'not-supported',
      `Only the R4 base profile ${BASE_PROFILE}${type} is supported, not ${profile}`,
      { expression: ['profile'] },
    );
  }
}

/** The issues of deleting `[type]/[id]`: it must exist, and not be managed through SCIM. */
async function deleteIssues(ctx: FhirContext, type: string, id: string | undefined): Promise<OutcomeIssue[]> {
  if (id === undefined) return [issue('error', 'required', 'mode=delete needs the id of the resource')];
  try {
    const current = await ctx.storage.readResource(ctx.projectId, type, id);
    if (isScimManaged(current)) {
      return [issue('error', 'conflict', `${type}/${id} is managed by the identity provider through SCIM`)];
    }
    return [];
  } catch (error) {
    if (error instanceof NotFoundError) return [issue('error', 'not-found', `${type}/${id} does not exist`)];
    throw error;
  }
}

/** The issues of the id of a resource written in `mode`. */
function idIssues(
  resource: FhirResource,
  request: ValidateRequest,
  mode: ValidationMode | undefined,
): OutcomeIssue[] {
  if (mode !== 'update') return [];
  const at = `${request.type}.id`;
  if (resource.id === undefined) return [issue('error', 'required', 'An update needs the resource id', at)];
  if (request.id !== undefined && resource.id !== request.id) {
    return [issue('error', 'invalid', 'The id of the resource is not the id of the instance', at)];
  }
  return [];
}

/**
 * `$validate`: runs the checks of a write of the resource (the basic ones of resource-checks.ts,
 * then names, structure and bindings at full strictness whatever the project's mode), and those
 * of `mode` (`update`: the id; `delete`: an existing resource SCIM does not manage). Answers an
 * OperationOutcome with every issue, or one `information` issue when there is none. A request that
 * cannot be validated (no resource, an unknown mode or profile, no right) throws a `FhirError`.
 * @see https://hl7.org/fhir/R4/resource-operation-validate.html
 */
export async function validateOperation(
  ctx: FhirContext,
  request: ValidateRequest,
): Promise<OperationOutcome> {
  checkType(request.type);
  if (request.id !== undefined) checkId(request.id);
  const { mode } = request;
  if (mode !== undefined && !MODES.has(mode)) {
    throw new FhirError(400, 'invalid', `Unknown mode ${mode}: create, update or delete`, {
      expression: ['mode'],
    });
  }
  const validationMode = mode as ValidationMode | undefined;
  for (const action of actionsOf(request, validationMode)) authorize(ctx, request.type, action);
  checkProfile(request.type, request.profile);
  if (request.resource === undefined && request.id === undefined)
    throw new FhirError(400, 'invalid', 'A resource body is required');

  const issues: OutcomeIssue[] = [];
  if (validationMode === 'delete') {
    const body = request.resource === undefined ? undefined : checkResource(request.resource, request.type);
    issues.push(...(await deleteIssues(ctx, request.type, request.id ?? body?.id)));
  } else {
    const resource =
      request.resource === undefined
        ? await ctx.storage.readResource(ctx.projectId, request.type, request.id!)
        : checkResource(request.resource, request.type);
    if (!ctx.validationIssues) throw new FhirError(500, 'exception', 'Validation is not available here');
    issues.push(...idIssues(resource, request, validationMode), ...(await ctx.validationIssues(resource)));
  }
  return outcomeOf(issues.length > 0 ? issues : [issue('information', 'informational', 'No issues found')]);
}
