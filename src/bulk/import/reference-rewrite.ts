/**
 * `$import` keeps resource ids, so a relative reference (`Patient/123`) stays right as it is; an
 * absolute one to the source server (`https://source.example/fhir/Patient/123`) would point back at
 * the source. This makes those relative; references to other servers are left alone.
 */
import type { FhirResource } from '../../storage/types.js';

const RELATIVE = /^[A-Z][A-Za-z]+\/[A-Za-z0-9\-.]{1,64}(?:\/_history\/[A-Za-z0-9\-.]{1,64})?$/;

/** A rewriter for references under `base` (no trailing slash); undefined when there is no base. */
export function referenceRewriter(
  base: string | undefined,
): ((resource: FhirResource) => FhirResource) | undefined {
  if (base === undefined) return undefined;
  const prefix = `${base.replace(/\/+$/, '')}/`;
  const rewrite = (value: unknown): unknown => {
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) value[i] = rewrite(value[i]);
      return value;
    }
    if (typeof value !== 'object' || value === null) return value;
    const object = value as Record<string, unknown>;
    for (const [key, item] of Object.entries(object)) {
      if (key === 'reference' && typeof item === 'string' && item.startsWith(prefix)) {
        const relative = item.slice(prefix.length);
        if (RELATIVE.test(relative)) object[key] = relative;
      } else if (typeof item === 'object' && item !== null) rewrite(item);
    }
    return object;
  };
  // Resources without the base anywhere (the usual case: exports write relative references) are
  // not walked.
  return (resource) =>
    JSON.stringify(resource).includes(prefix) ? (rewrite(resource) as FhirResource) : resource;
}
