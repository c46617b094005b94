import { NotFoundError } from '../../storage/errors.js';
import type { Storage, StoredResource, UserRecord } from '../../storage/types.js';
import type { PickerPatient } from '../browser/authorization-pages.js';

/**
 * The launch context patient of a signed-in user (SMART `launch/patient`, standalone launch): a
 * Patient user's own profile, a RelatedPerson's `patient`, and for a Practitioner a choice on the
 * patient picker (`pick`). `problem` when there is none to give (a RelatedPerson without patient).
 */
export async function launchPatientOf(
  storage: Storage,
  user: UserRecord,
): Promise<{ patient: string } | { pick: true } | { problem: string }> {
  if (user.userType === 'Patient') return { patient: user.profileId };
  if (user.userType === 'Practitioner') return { pick: true };
  let related: StoredResource;
  try {
    related = await storage.readResource(user.projectId, 'RelatedPerson', user.profileId);
  } catch (error) {
    if (error instanceof NotFoundError) return { problem: 'Your RelatedPerson profile does not exist' };
    throw error;
  }
  const reference = (related.patient as { reference?: unknown } | undefined)?.reference;
  const match =
    typeof reference === 'string' ? /^(?:.*\/)?Patient\/([A-Za-z0-9\-.]{1,64})$/.exec(reference) : null;
  if (!match) return { problem: 'Your RelatedPerson profile names no patient' };
  return { patient: match[1]! };
}

/** A display name of a Patient: its first `name`'s text, or given and family names; else its id. */
export function patientName(patient: StoredResource): string {
  const names = Array.isArray(patient.name) ? (patient.name as Record<string, unknown>[]) : [];
  const first = names[0];
  if (first) {
    if (typeof first.text === 'string' && first.text.trim()) return first.text.trim();
    const given = Array.isArray(first.given) ? first.given.filter((g) => typeof g === 'string') : [];
    const family = typeof first.family === 'string' ? [first.family] : [];
    const full = [...given, ...family].join(' ').trim();
    if (full) return full;
  }
  return patient.id;
}

function nameParts(patient: StoredResource): string[] {
  const names = Array.isArray(patient.name) ? (patient.name as Record<string, unknown>[]) : [];
  const parts: string[] = [];
  for (const n of names) {
    const given: unknown[] = Array.isArray(n.given) ? (n.given as unknown[]) : [];
    for (const value of [n.text, n.family, ...given]) {
      if (typeof value === 'string') parts.push(value.toLowerCase());
    }
  }
  return parts;
}

/**
 * Patients of the project whose name (text, family or a given name) starts with `query`,
 * case-insensitively, at most `count`, for the picker of a Practitioner (who may read the project's
 * data). The match runs over the project's Patients (`where`): fine for a picker's page.
 */
export async function findPatients(
  storage: Storage,
  projectId: string,
  query: string,
  count: number,
): Promise<PickerPatient[]> {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  const page = await storage.searchResources(projectId, 'Patient', {
    where: (patient) => {
      const parts = nameParts(patient);
      return words.every((w) =>
        parts.some((p) => p.startsWith(w) || p.split(/\s+/).some((x) => x.startsWith(w))),
      );
    },
    sort: '_id',
    count,
    total: 'none',
  });
  return page.resources.map((p) => ({
    id: p.id,
    name: patientName(p),
    ...(typeof p.birthDate === 'string' ? { birthDate: p.birthDate } : {}),
  }));
}
