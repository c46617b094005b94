/** The `Prefer` header preferences the FHIR API honours. @see https://hl7.org/fhir/R4/http.html#prefer */
export interface FhirPreferences {
  /** `handling=strict` (unknown search parameters are errors) or `lenient` (ignored). */
  handling?: 'strict' | 'lenient';
  /** `return=minimal` (no body), `representation` (the resource) or `OperationOutcome`. */
  return?: 'minimal' | 'representation' | 'OperationOutcome';
}

/** Reads the preferences of a `Prefer` header (RFC 7240); unknown ones are ignored. */
export function parsePrefer(header: string | string[] | undefined): FhirPreferences {
  const out: FhirPreferences = {};
  const values = Array.isArray(header) ? header : header === undefined ? [] : [header];
  for (const value of values) {
    for (const part of value.split(',')) {
      const [rawName, rawValue] = part.split(';')[0]!.split('=');
      const name = rawName?.trim().toLowerCase();
      const v = rawValue?.trim().replace(/^"|"$/g, '');
      if (name === 'handling' && (v === 'strict' || v === 'lenient')) out.handling = v;
      if (name === 'return' && (v === 'minimal' || v === 'representation' || v === 'OperationOutcome'))
        out.return = v;
    }
  }
  return out;
}

/**
 * What a successful write answers: the request's `Prefer: return=`, else the router's default
 * (`OperationOutcome` only when asked for, as the FHIR spec says).
 */
export function returnPreference(
  prefer: FhirPreferences,
  defaultReturn: 'representation' | 'minimal',
): 'minimal' | 'representation' | 'OperationOutcome' {
  return prefer.return ?? defaultReturn;
}
