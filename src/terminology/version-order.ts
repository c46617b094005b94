/**
 * Orders two versions of a code system or value set: dot-separated parts compared numerically when
 * both are numbers, as text otherwise (`1.10` after `1.9`, `2020-01` after `2019-12`). An absent
 * version comes first. FHIR leaves version order to the resource (`versionAlgorithm` is R5); this
 * is the common semantic-version and date reading.
 * @see https://hl7.org/fhir/R4/resource.html#versions
 */
export function compareVersions(a: string | undefined, b: string | undefined): number {
  if (a === b) return 0;
  if (a === undefined) return -1;
  if (b === undefined) return 1;
  const left = a.split('.');
  const right = b.split('.');
  for (let i = 0; i < Math.max(left.length, right.length); i++) {
    const order = comparePart(left[i], right[i]);
    if (order !== 0) return order;
  }
  return 0;
}

function comparePart(a: string | undefined, b: string | undefined): number {
  if (a === b) return 0;
  if (a === undefined) return -1;
  if (b === undefined) return 1;
  const numeric = /^\d+$/;
  if (numeric.test(a) && numeric.test(b)) return Number(a) - Number(b);
  return a < b ? -1 : 1;
}

/** Splits a canonical reference `url|version` into its parts. */
export function splitCanonical(reference: string): { url: string; version?: string } {
  const bar = reference.indexOf('|');
  if (bar < 0) return { url: reference };
  const version = reference.slice(bar + 1);
  return version ? { url: reference.slice(0, bar), version } : { url: reference.slice(0, bar) };
}
