import { AUDIT_EVENT_TYPE } from './codes.js';

const DOCS: Record<string, { type: string; documentation: string }> = {
  date: { type: 'date', documentation: 'recorded; prefixes eq, gt, ge, lt, le; partial dates are ranges.' },
  agent: {
    type: 'reference',
    documentation: 'agent.who: Type/[id], [id] (also a client or user id), or :identifier=system|value.',
  },
  entity: { type: 'reference', documentation: 'entity.what: Type/[id], [id], or :identifier=system|value.' },
  action: { type: 'token', documentation: 'C, R, U, D or E.' },
  type: {
    type: 'token',
    documentation: 'A DICOM code (110110 Patient Record, 110112 Query, …), system|code or code.',
  },
  subtype: { type: 'token', documentation: 'A DICOM or restful-interaction code.' },
  outcome: { type: 'token', documentation: '0, 4, 8 or 12.' },
};

/**
 * The CapabilityStatement entry of `AuditEvent`, from the generic one: read and search only (the
 * trail is append-only), its own parameters documented as this server answers them (in the place
 * of the R4 entries of the same name). Other types are returned unchanged.
 */
export function auditEventCapability<T extends { type: string; searchParam?: { name: string }[] }>(
  entry: T,
): T {
  if (entry.type !== AUDIT_EVENT_TYPE) return entry;
  const own = (name: string) => {
    const doc = DOCS[name]!;
    return {
      name,
      type: doc.type,
      definition: `http://hl7.org/fhir/SearchParameter/AuditEvent-${name}`,
      documentation: doc.documentation,
    };
  };
  const given = entry.searchParam ?? [];
  const names = new Set(given.map((p) => p.name));
  return {
    ...entry,
    interaction: [
      { code: 'read' },
      { code: 'vread' },
      { code: 'history-instance' },
      { code: 'history-type' },
      { code: 'search-type' },
    ],
    updateCreate: false,
    conditionalCreate: false,
    conditionalUpdate: false,
    conditionalDelete: 'not-supported',
    searchParam: [
      ...given.map((p) => (p.name in DOCS ? { ...p, ...own(p.name) } : p)),
      ...Object.keys(DOCS)
        .filter((name) => !names.has(name))
        .map(own),
    ],
  };
}
