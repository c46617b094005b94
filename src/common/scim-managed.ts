/**
 * The mark of a FHIR resource the identity provider owns through SCIM (a SCIM Group is a FHIR
 * `Group` carrying it): the SCIM router writes it, the FHIR router refuses to change what carries
 * it. Here because both read it and neither may import the other.
 */

/** The `meta.tag` of a resource SCIM owns. */
export const SCIM_MANAGED_TAG = {
  system: 'urn:fhir-platform-kit:tag',
  code: 'scim-managed',
  display: 'Managed by the identity provider through SCIM',
} as const;

/** Whether `resource` carries {@link SCIM_MANAGED_TAG} in `meta.tag`. */
export function isScimManaged(resource: { meta?: unknown }): boolean {
  const meta = resource.meta;
  if (typeof meta !== 'object' || meta === null) return false;
  const tags = (meta as { tag?: unknown }).tag;
  if (!Array.isArray(tags)) return false;
  return tags.some(
    (tag: unknown) =>
      typeof tag === 'object' &&
      tag !== null &&
      (tag as { system?: unknown }).system === SCIM_MANAGED_TAG.system &&
      (tag as { code?: unknown }).code === SCIM_MANAGED_TAG.code,
  );
}

/**
 * The `identifier.system` under which a SCIM Group's FHIR `Group` carries its display name's
 * {@link groupNameKey}: indexed, so that a name is found with a token search (R4 has no Group `name`
 * search parameter). Here because SCIM writes it and sign-in (the groups' roles) reads it.
 */
export const SCIM_GROUP_NAME_SYSTEM = 'urn:fhir-platform-kit:scim-group-name';

/** The key under which a group's display name is unique and found (case-insensitive, like `userName`). */
export function groupNameKey(displayName: string): string {
  return displayName.toLowerCase();
}
