import { beforeAll, describe, expect, it } from 'vitest';
import {
  resolveTerminologyFilters,
  type TerminologyResolution,
} from '../../src/fhir/search/resolve-terminology.js';
import { FhirError } from '../../src/http/http-error.js';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { parseSearchRequest } from '../../src/search/parse.js';
import { findUnresolvedTerminology, type SearchRequest } from '../../src/storage/search-request.js';
import type { TerminologySource } from '../../src/terminology/terminology-types.js';
import { fakeTerminology } from '../helpers/fake-terminology.js';

let registry: SearchRegistry;
beforeAll(async () => {
  registry = await loadSearchRegistry();
});

const STATUS = 'http://hl7.org/fhir/observation-status';
const SYS = 'urn:acme:cs';
const service = fakeTerminology({
  valueSets: {
    'urn:vs:status': [
      { system: STATUS, code: 'final' },
      { system: STATUS, code: 'amended' },
    ],
    'urn:vs:acme|2': [{ system: SYS, code: 'a' }],
    'urn:vs:empty': [],
    'urn:vs:big': Array.from({ length: 30 }, (_, i) => ({ system: SYS, code: `c${i}` })),
  },
  systems: { [SYS]: { parent: [], child: ['parent'], grandchild: ['child'], other: [] } },
});
const source: TerminologySource = {
  key: 'p',
  find: () => Promise.resolve(undefined),
};
const terminology: TerminologyResolution = { service, source, maxCodes: 20 };

const parse = (type: string, query: string): SearchRequest =>
  parseSearchRequest(registry, type, new URLSearchParams(query)).request;
const resolve = (type: string, query: string, t: TerminologyResolution | undefined = terminology) =>
  resolveTerminologyFilters(registry, parse(type, query), t);

async function refusal(promise: Promise<unknown>): Promise<FhirError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(FhirError);
  return error as FhirError;
}

describe('resolveTerminologyFilters', () => {
  it(':in becomes the plain token list; a code element is matched without a system too', async () => {
    const request = await resolve('Observation', 'status:in=urn:vs:status&code=x');
    expect(request.filters).toEqual([
      {
        kind: 'parameter',
        code: 'status',
        type: 'token',
        values: [
          { type: 'token', system: STATUS, code: 'final' },
          { type: 'token', system: STATUS, code: 'amended' },
          { type: 'token', system: null, code: 'final' },
          { type: 'token', system: null, code: 'amended' },
        ],
      },
      parse('Observation', 'code=x').filters[0],
    ]);
    // The source given is the context's: a project's own value sets are read with the caller's rights.
    expect(service.calls.at(-1)).toMatchObject({ method: 'valueSetCodes', args: ['urn:vs:status', 20] });
    expect(service.calls.at(-1)!.source?.key).toBe(source.key);
  });

  it(':not-in becomes :not; a coded element keeps its system; values are ORed and deduplicated', async () => {
    const request = await resolve('Observation', 'code:not-in=urn:vs:acme|2,urn:vs:acme|2');
    expect(request.filters).toEqual([
      {
        kind: 'parameter',
        code: 'code',
        type: 'token',
        modifier: 'not',
        values: [{ type: 'token', system: SYS, code: 'a' }],
      },
    ]);
  });

  it(':below and :above: the code with its descendants or ancestors', async () => {
    const below = await resolve('Condition', `code:below=${SYS}|parent`);
    expect(below.filters[0]).toMatchObject({
      values: ['child', 'grandchild', 'parent'].map((code) => ({ type: 'token', system: SYS, code })),
    });
    expect(below.filters[0]).not.toHaveProperty('modifier');
    const above = await resolve('Condition', `code:above=${SYS}|child`);
    expect(above.filters[0]).toMatchObject({
      values: ['child', 'parent'].map((code) => ({ type: 'token', system: SYS, code })),
    });
  });

  it('an empty value set: :in matches nothing (no value), :not-in everything', async () => {
    expect((await resolve('Observation', 'code:in=urn:vs:empty')).filters[0]).toEqual({
      kind: 'parameter',
      code: 'code',
      type: 'token',
      values: [],
    });
    expect((await resolve('Observation', 'code:not-in=urn:vs:empty')).filters[0]).toMatchObject({
      modifier: 'not',
      values: [],
    });
  });

  it('resolves in chains and _has, at any depth', async () => {
    const request = await resolve(
      'Patient',
      '_has:Observation:subject:status:in=urn:vs:status&_has:Observation:subject:subject:Patient.gender:not-in=urn:vs:acme|2',
    );
    expect(findUnresolvedTerminology(request.filters)).toBeUndefined();
    expect(request.filters[0]).toMatchObject({
      kind: 'has',
      filter: { code: 'status', values: { length: 4 } },
    });
    expect(request.filters[1]).toMatchObject({
      kind: 'has',
      filter: { kind: 'chain', filter: { code: 'gender', modifier: 'not', values: { length: 2 } } },
    });
  });

  it('answers the request itself when it has no terminology filter', async () => {
    const request = parse('Observation', 'code=x&subject:Patient.name=a');
    expect(await resolveTerminologyFilters(registry, request, undefined)).toBe(request);
  });

  it('refuses with a 400 naming the parameter', async () => {
    const unknown = await refusal(resolve('Observation', 'code:in=urn:vs:nope'));
    expect([unknown.status, unknown.issueCode, unknown.expression]).toEqual([400, 'not-found', ['code:in']]);
    const system = await refusal(resolve('Condition', 'code:below=urn:nope|a'));
    expect([system.status, system.issueCode]).toEqual([400, 'not-found']);
    const code = await refusal(resolve('Condition', `code:above=${SYS}|nope`));
    expect([code.status, code.issueCode]).toEqual([400, 'invalid']);
    const big = await refusal(resolve('Observation', 'code:in=urn:vs:big'));
    expect([big.status, big.issueCode, big.expression]).toEqual([400, 'too-costly', ['code:in']]);
    // Two value sets within the bound each, past it together.
    const many = await refusal(
      resolve('Observation', 'code:in=urn:vs:big', { ...terminology, maxCodes: 30 }).then(() =>
        resolve('Observation', 'code:in=urn:vs:big,urn:vs:acme|2', { ...terminology, maxCodes: 30 }),
      ),
    );
    expect(many.issueCode).toBe('too-costly');
    const nested = await refusal(resolve('Patient', '_has:Observation:subject:code:in=urn:vs:nope'));
    expect(nested.expression).toEqual(['_has:Observation:subject:code:in']);
    const none = await refusal(
      resolveTerminologyFilters(registry, parse('Observation', 'status:in=urn:vs:status'), undefined),
    );
    expect([none.status, none.issueCode]).toEqual([400, 'not-supported']);
  });

  it('a caller who may not search ValueSets keeps the server ones; one found nowhere else is a 403', async () => {
    const denied = new FhirError(403, 'forbidden', 'Not allowed to search ValueSet resources');
    const refusing: TerminologySource = {
      key: 'p',
      find: () => {
        throw denied;
      },
    };
    // Like the engine: the project's value set first, then the server's.
    const reading = fakeTerminology({
      valueSets: { 'urn:vs:acme': [{ system: SYS, code: 'a' }] },
      systems: {},
    });
    const fromServer = reading.valueSetCodes.bind(reading);
    reading.valueSetCodes = async (url, limit, source) => {
      await source?.find('ValueSet', url);
      return fromServer(url, limit, source);
    };
    const t = { service: reading, source: refusing, maxCodes: 20 };
    expect((await resolve('Observation', 'code:in=urn:vs:acme', t)).filters[0]).toMatchObject({
      values: [{ system: SYS, code: 'a' }],
    });
    expect(await refusal(resolve('Observation', 'code:in=urn:vs:project', t))).toBe(denied);
  });

  it('lets a refusal of the source (403) through', async () => {
    const denied = new FhirError(403, 'forbidden', 'Not allowed to search ValueSet resources');
    const refusing = fakeTerminology({ valueSets: {}, systems: {} });
    refusing.valueSetCodes = () => Promise.reject(denied);
    const error = await refusal(
      resolve('Observation', 'code:in=urn:vs:any', { ...terminology, service: refusing }),
    );
    expect(error).toBe(denied);
  });
});
