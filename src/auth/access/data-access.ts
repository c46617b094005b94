import type { Principal } from '../../http/principal.js';
import type { FhirResource, PatientCompartment } from '../../storage/types.js';
import { isSmartUser, scopeAction, type ResourceAction } from './access.js';
import { scopesAllow } from './scopes.js';

/**
 * Which resources of a type a principal reaches, past `canAccess`'s yes or no for the type:
 * `undefined`, every resource of its project; otherwise only those in the Patient compartment of one
 * of these patients (none at all when empty).
 */
export type PatientLimit = readonly string[] | undefined;

/**
 * What a signed-in SMART user may see, per request (SMART App Launch 2.x "Scopes and Launch
 * Context"; the compartments of the FHIR R4 CompartmentDefinition "Patient"):
 *
 * - `patient/` scopes reach the compartment of the launch patient (`principal.patientId`); without
 *   one they reach nothing (`canAccess` already refuses them).
 * - `user/` scopes reach what the user may see: a Patient user its own compartment, a RelatedPerson
 *   user the compartment of the patient its profile's `patient` names, a Practitioner user the whole
 *   project. Any other profile type reaches nothing but its own profile.
 * - The user's own profile resource is readable with a `user/` scope of its type.
 * - `system/` scopes are ignored (never a user's).
 */
export interface DataAccess {
  /** The patients whose compartments bound `action` on `resourceType`. */
  limit(resourceType: string, action: ResourceAction): Promise<PatientLimit>;
  /** Whether `resource` (a version of it) is within what `action` on its type reaches. */
  permits(resource: FhirResource, action: ResourceAction): Promise<boolean>;
  /** The compartments `resource` is in (what `permits` compares with the limit). */
  patientIdsOf(resource: FhirResource): string[];
}

/**
 * Reads a profile resource of the principal's project; resolves undefined when there is none (a
 * deleted or unknown profile).
 */
export type ProfileReader = (resourceType: string, id: string) => Promise<FhirResource | undefined>;

/**
 * The data access rule of `principal`, or undefined when it is not a SMART user, or is an admin
 * (clients, admins and host-built principals reach their whole project, as their scopes allow). Reads the RelatedPerson
 * profile at most once (build one per request). `compartment` is the Patient compartment definition
 * (the R4 one, as the stores index).
 */
export function dataAccess(
  principal: Principal,
  compartment: PatientCompartment,
  readProfile: ProfileReader,
): DataAccess | undefined {
  if (!isSmartUser(principal)) return undefined;
  const [profileType = '', profileId = ''] = principal.fhirUser.split('/');
  let linked: Promise<string[]> | undefined;
  /** The patients the user itself may see (its `user/` scopes' reach); undefined: the project. */
  const userPatients = async (): Promise<PatientLimit> => {
    switch (profileType) {
      case 'Practitioner':
        return undefined;
      case 'Patient':
        return [profileId];
      case 'RelatedPerson':
        linked ??= readProfile(profileType, profileId).then((p) => (p ? compartment.patientIds(p) : []));
        return linked;
      default:
        return [];
    }
  };
  const limit = async (resourceType: string, action: ResourceAction): Promise<PatientLimit> => {
    const letter = scopeAction(action);
    const patients = new Set<string>();
    if (scopesAllow(principal.scopes, resourceType, letter, ['user'])) {
      const own = await userPatients();
      if (own === undefined) return undefined;
      for (const id of own) patients.add(id);
    }
    if (principal.patientId !== undefined && scopesAllow(principal.scopes, resourceType, letter, ['patient']))
      patients.add(principal.patientId);
    return [...patients];
  };
  const patientIdsOf = (resource: FhirResource): string[] => compartment.patientIds(resource);
  return {
    limit,
    patientIdsOf,
    async permits(resource, action) {
      const reach = await limit(resource.resourceType, action);
      if (reach === undefined) return true;
      if (
        (action === 'read' || action === 'search') &&
        `${resource.resourceType}/${String(resource.id)}` === principal.fhirUser &&
        scopesAllow(principal.scopes, resource.resourceType, scopeAction(action), ['user'])
      )
        return true;
      return reach.length > 0 && patientIdsOf(resource).some((id) => reach.includes(id));
    },
  };
}

/** Not a FHIR id: a compartment of it is always empty. */
const NO_PATIENT = '*';

/**
 * A query's `compartment` narrowed to `limit`: its intersection with the compartment the query
 * already names, or a compartment no resource is in when nothing is left.
 */
export function limitCompartment(
  compartment: readonly string[] | undefined,
  limit: PatientLimit,
): string[] | undefined {
  if (limit === undefined) return compartment ? [...compartment] : undefined;
  const within = compartment ? limit.filter((id) => compartment.includes(id)) : [...limit];
  return within.length > 0 ? within : [NO_PATIENT];
}
