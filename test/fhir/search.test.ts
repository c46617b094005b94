import { describe, expect, it } from 'vitest';
import { FhirError } from '../../src/http/http-error.js';
import { parseDateRange } from '../../src/common/date-range.js';
import { parseSearchParams } from '../../src/fhir/search.js';
import type { StoredResource } from '../../src/storage/types.js';

const p = (q: string) => new URLSearchParams(q);
const ms = (iso: string) => Date.parse(iso);

function stored(resource: Record<string, unknown>): StoredResource {
  return {
    id: 'x',
    meta: { versionId: '1', lastUpdated: '2024-01-01T00:00:00Z' },
    ...resource,
  } as StoredResource;
}

function expect400(fn: () => unknown, expression?: string): void {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(FhirError);
    expect((e as FhirError).status).toBe(400);
    if (expression) expect((e as FhirError).expression).toEqual([expression]);
    return;
  }
  throw new Error('expected a 400 FhirError');
}

describe('parseDateRange', () => {
  it('turns partial dates into ranges', () => {
    expect(parseDateRange('2020')).toEqual({
      start: ms('2020-01-01T00:00:00Z'),
      end: ms('2021-01-01T00:00:00Z'),
    });
    expect(parseDateRange('2020-02')).toEqual({
      start: ms('2020-02-01T00:00:00Z'),
      end: ms('2020-03-01T00:00:00Z'),
    });
    expect(parseDateRange('2020-12-31')).toEqual({
      start: ms('2020-12-31T00:00:00Z'),
      end: ms('2021-01-01T00:00:00Z'),
    });
    expect(parseDateRange('2020-01-01T10:00')).toEqual({
      start: ms('2020-01-01T10:00:00Z'),
      end: ms('2020-01-01T10:01:00Z'),
    });
    expect(parseDateRange('2020-01-01T10:00:05+02:00')).toEqual({
      start: ms('2020-01-01T08:00:05Z'),
      end: ms('2020-01-01T08:00:06Z'),
    });
    expect(parseDateRange('2020-01-01T10:00:05.1Z')).toEqual({
      start: ms('2020-01-01T10:00:05.100Z'),
      end: ms('2020-01-01T10:00:05.200Z'),
    });
    expect(
      parseDateRange('2020-01-01T10:00:05.123456Z')!.end -
        parseDateRange('2020-01-01T10:00:05.123456Z')!.start,
    ).toBe(1);
  });

  it('rejects invalid dates', () => {
    for (const bad of [
      '',
      '20',
      '2020-13',
      '2020-02-30',
      '2020-01-01T25:00Z',
      '2020-01-01T10',
      'yesterday',
      '2020-01-01T10:00+15:00',
    ]) {
      expect(parseDateRange(bad)).toBeUndefined();
    }
  });
});

describe('parseSearchParams', () => {
  it('defaults the page size and caps _count', () => {
    expect(parseSearchParams('Observation', p('')).query).toEqual({ count: 20 });
    expect(parseSearchParams('Observation', p('_count=5000'), { maxCount: 100 }).query.count).toBe(100);
    expect(parseSearchParams('Observation', p('_count=0&_offset=40')).query).toMatchObject({
      count: 0,
      offset: 40,
    });
    expect(parseSearchParams('Observation', p('_summary=count')).query.count).toBe(0);
    expect400(() => parseSearchParams('Observation', p('_count=-1')), '_count');
    expect400(() => parseSearchParams('Observation', p('_offset=abc')), '_offset');
  });

  it('parses _id lists and intersects repeats', () => {
    expect(parseSearchParams('Patient', p('_id=a,b,c')).query.ids).toEqual(['a', 'b', 'c']);
    expect(parseSearchParams('Patient', p('_id=a,b&_id=b,c')).query.ids).toEqual(['b']);
    expect400(() => parseSearchParams('Patient', p('_id=a,b_c')), '_id');
  });

  it('parses _lastUpdated prefixes into a ge/lt range', () => {
    const q = (s: string) => parseSearchParams('Patient', p(s)).query.lastUpdated;
    expect(q('_lastUpdated=2020')).toEqual({
      ge: ms('2020-01-01T00:00:00Z'),
      lt: ms('2021-01-01T00:00:00Z'),
    });
    expect(q('_lastUpdated=eq2020-01-01')).toEqual({
      ge: ms('2020-01-01T00:00:00Z'),
      lt: ms('2020-01-02T00:00:00Z'),
    });
    expect(q('_lastUpdated=gt2020')).toEqual({ ge: ms('2021-01-01T00:00:00Z') });
    expect(q('_lastUpdated=ge2020')).toEqual({ ge: ms('2020-01-01T00:00:00Z') });
    expect(q('_lastUpdated=lt2020')).toEqual({ lt: ms('2020-01-01T00:00:00Z') });
    expect(q('_lastUpdated=le2020')).toEqual({ lt: ms('2021-01-01T00:00:00Z') });
    expect(q('_lastUpdated=ge2020&_lastUpdated=lt2020-06&_lastUpdated=gt2019')).toEqual({
      ge: ms('2020-01-01T00:00:00Z'),
      lt: ms('2020-06-01T00:00:00Z'),
    });
    expect400(() => q('_lastUpdated=sa2020'), '_lastUpdated');
    expect400(() => q('_lastUpdated=ne2020'), '_lastUpdated');
    expect400(() => q('_lastUpdated=2020-99'), '_lastUpdated');
    expect400(() => q('_lastUpdated=2020,2021'), '_lastUpdated');
  });

  it('parses _sort', () => {
    expect(parseSearchParams('Patient', p('_sort=-_lastUpdated')).query.sort).toBe('-_lastUpdated');
    expect(parseSearchParams('Patient', p('_sort=_id')).query.sort).toBe('_id');
    expect400(() => parseSearchParams('Patient', p('_sort=name')), '_sort');
  });

  it('turns patient reference parameters into a compartment and a where test', () => {
    const { query } = parseSearchParams('Observation', p('patient=Patient/a,b'));
    expect(query.compartment?.sort()).toEqual(['a', 'b']);
    expect(query.where!(stored({ resourceType: 'Observation', subject: { reference: 'Patient/a' } }))).toBe(
      true,
    );
    expect(query.where!(stored({ resourceType: 'Observation', subject: { reference: 'Patient/c' } }))).toBe(
      false,
    );
    // In the compartment through performer, but the patient parameter reads subject only.
    expect(
      query.where!(
        stored({
          resourceType: 'Observation',
          subject: { reference: 'Patient/z' },
          performer: [{ reference: 'Patient/a' }],
        }),
      ),
    ).toBe(false);
    const perf = parseSearchParams('Observation', p('performer=Patient/a')).query;
    expect(
      perf.where!(stored({ resourceType: 'Observation', performer: [{ reference: 'Patient/a' }] })),
    ).toBe(true);
    const abs = parseSearchParams('Encounter', p('subject:Patient=https://x.example/fhir/Patient/q')).query;
    expect(abs.compartment).toEqual(['q']);
  });

  it('matches non-Patient references exactly, without a compartment', () => {
    const { query } = parseSearchParams('Observation', p('subject=Group/g1'));
    expect(query.compartment).toBeUndefined();
    expect(query.where!(stored({ resourceType: 'Observation', subject: { reference: 'Group/g1' } }))).toBe(
      true,
    );
    expect(query.where!(stored({ resourceType: 'Observation', subject: { reference: 'Group/g2' } }))).toBe(
      false,
    );
    expect400(() => parseSearchParams('Observation', p('subject:Patient=Group/g1')));
    expect400(() => parseSearchParams('Observation', p('subject=not a ref')), 'subject');
  });

  it('ANDs repeated reference parameters', () => {
    const { query } = parseSearchParams('Observation', p('patient=a,b&subject=b'));
    expect(query.compartment).toEqual(['b']);
    const none = parseSearchParams('Observation', p('patient=a&subject=b')).query;
    expect(none.where!(stored({ resourceType: 'Observation', subject: { reference: 'Patient/a' } }))).toBe(
      false,
    );
  });

  it('passes the first identifier parameter to the store index and ANDs repeats with a where test', () => {
    const one = parseSearchParams('Observation', p('identifier=urn:lab|1,|free,urn:x|,plain,a\\|b|c\\,d'));
    expect(one.query.identifier).toEqual([
      { system: 'urn:lab', value: '1' },
      { system: null, value: 'free' },
      { system: 'urn:x' },
      { value: 'plain' },
      { system: 'a|b', value: 'c,d' },
    ]);
    expect(one.query.where).toBeUndefined();
    expect(one.applied).toEqual([['identifier', 'urn:lab|1,|free,urn:x|,plain,a\\|b|c\\,d']]);
    const two = parseSearchParams('Observation', p('identifier=urn:lab|1&identifier=urn:mrn|'));
    expect(two.query.identifier).toEqual([{ system: 'urn:lab', value: '1' }]);
    const where = two.query.where!;
    expect(where(stored({ identifier: [{ system: 'urn:mrn', value: '7' }] }))).toBe(true);
    expect(where(stored({ identifier: [{ system: 'urn:lab', value: '1' }] }))).toBe(false);
  });

  it('ignores unknown parameters leniently and rejects them strictly', () => {
    const lenient = parseSearchParams(
      'Observation',
      p('code=1234&patient=a&_include=x&subject:missing=true'),
    );
    expect(lenient.ignored).toEqual(['code', '_include', 'subject:missing']);
    expect(lenient.applied).toEqual([['patient', 'a']]);
    expect400(() => parseSearchParams('Observation', p('code=1234'), { strict: true }), 'code');
    expect400(() => parseSearchParams('Organization', p('patient=a'), { strict: true }), 'patient');
    expect(
      parseSearchParams('Observation', p('_format=json&_pretty=true'), { strict: true }).ignored,
    ).toEqual([]);
  });

  it('accepts plain arrays of pairs (for _typeFilter)', () => {
    const { query, applied } = parseSearchParams('Condition', [
      ['patient', 'Patient/p1'],
      ['_lastUpdated', 'gt2020-01-01'],
    ]);
    expect(query.compartment).toEqual(['p1']);
    expect(applied.length).toBe(2);
  });
});
