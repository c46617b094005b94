/**
 * A string as string search compares it: decomposed (NFD), combining marks removed, lowercased, so
 * that `Müller`, `muller` and `MULLER` are one. FHIR R4 string search: "case-insensitive and
 * accent-insensitive" by default.
 * @see https://hl7.org/fhir/R4/search.html#string
 */
export function normalizeText(text: string): string {
  // ASCII has no decomposition and no marks (most texts: a fast path, since writes index them).
  if (ASCII.test(text)) return text.toLowerCase();
  return text.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase();
}

// eslint-disable-next-line no-control-regex -- every ASCII character, the control ones included
const ASCII = /^[\x00-\x7F]*$/;
