import { describe, expect, it } from 'vitest';
import {
  loadSummaryTable,
  summaryElements,
  summaryTableOf,
} from '../../src/fhir/capability/summary-elements.js';

// A made-up definition: a choice, a backbone element, and a contentReference to it.
const definition = {
  resourceType: 'StructureDefinition',
  type: 'Thing',
  snapshot: {
    element: [
      { path: 'Thing' },
      { path: 'Thing.id', isSummary: true },
      { path: 'Thing.status', min: 1, isSummary: true },
      { path: 'Thing.note', min: 0 },
      { path: 'Thing.value[x]', isSummary: true },
      { path: 'Thing.part', isSummary: true },
      { path: 'Thing.part.name', min: 1, isSummary: true },
      { path: 'Thing.part.detail' },
      { path: 'Thing.other', isSummary: true, contentReference: '#Thing.part' },
    ],
  },
};

describe('summaryElements', () => {
  const table = summaryTableOf(definition);

  it('reads the summary paths, the references and the mandatory top-level elements', () => {
    expect(table.mandatory).toEqual(['status']);
    expect(table.references.get('Thing.other')).toBe('Thing.part');
    expect(table.summary.has('Thing.part.name')).toBe(true);
  });

  it('keeps summary elements at every depth: choices, primitive extensions, references', () => {
    const thing = {
      resourceType: 'Thing',
      id: 't',
      status: 'on',
      _status: { extension: [] },
      note: 'left out',
      valueQuantity: { value: 1 },
      part: [{ name: 'a', detail: 'left out' }],
      other: { name: 'b', detail: 'left out' },
    };
    expect(summaryElements(thing, table)).toEqual({
      resourceType: 'Thing',
      id: 't',
      status: 'on',
      _status: { extension: [] },
      valueQuantity: { value: 1 },
      part: [{ name: 'a' }],
      other: { name: 'b' },
    });
  });

  it("reads R4's CapabilityStatement", async () => {
    const r4 = await loadSummaryTable('CapabilityStatement');
    expect(r4.mandatory).toEqual(['status', 'date', 'kind', 'fhirVersion', 'format']);
    expect(r4.summary.has('CapabilityStatement.rest.resource.type')).toBe(true);
    expect(r4.summary.has('CapabilityStatement.rest.resource.searchParam')).toBe(false);
    expect(r4.references.get('CapabilityStatement.rest.operation')).toBe(
      'CapabilityStatement.rest.resource.operation',
    );
  });
});
