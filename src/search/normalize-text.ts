/**
 * A string as string search compares it: decomposed (NFD), combining marks removed, lowercased, so
 * that `Müller`, `muller` and `MULLER` are one. FHIR R4 string search: "case-insensitive and
 * accent-insensitive" by default.
 * @see https://hl7.org/fhir/R4/search.html#string
 */
export function normalizeText(text: string): string {
  return text.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase();
}
