import fc from 'fast-check';
import type { FhirResource } from '../../../src/storage/types.js';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

/** One place in a resource: the object or array holding it, and its key or index. */
interface Slot {
  holder: JsonObject | Json[];
  key: string | number;
}

function slots(root: JsonObject): { all: Slot[]; objects: JsonObject[] } {
  const all: Slot[] = [];
  const objects: JsonObject[] = [];
  const visit = (value: Json): void => {
    if (value === null || typeof value !== 'object') return;
    if (Array.isArray(value)) {
      value.forEach((item, i) => {
        all.push({ holder: value, key: i });
        visit(item);
      });
      return;
    }
    objects.push(value);
    for (const key of Object.keys(value)) {
      all.push({ holder: value, key });
      visit(value[key]!);
    }
  };
  visit(root);
  return { all, objects };
}

/** Sets an own property, `__proto__` included (as `JSON.parse` does), never touching a prototype. */
function setOwn(object: JsonObject, key: string, value: Json): void {
  Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
}

const read = (slot: Slot): Json => (slot.holder as Record<string | number, Json>)[slot.key]!;
const write = (slot: Slot, value: Json): void => {
  if (Array.isArray(slot.holder)) slot.holder[slot.key as number] = value;
  else setOwn(slot.holder, slot.key as string, value);
};

/** Strings that break one primitive format or another (and a few that are fine). */
export const STRINGS: readonly string[] = [
  '',
  ' ',
  '\t\n',
  'a  b',
  ' leading',
  'trailing ',
  'tab\there',
  'ctl\u0001char',
  'line\nbreak',
  'ünïcödé ✓',
  '\u00a0',
  '2020-13-01',
  '2020-02-30',
  '2021-05-06',
  '2021-05',
  '0000',
  '2021-05-06T10:20:30Z',
  '2021-05-06T10:20:30.1234567891Z',
  '2021-05-06T25:00:00Z',
  '2021-05-06T10:20',
  '2021-05-06T10:20:30+14:00',
  '2021-05-06T10:20:30+15:00',
  '10:20:30',
  '24:00:00',
  'urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0a',
  'urn:uuid:61EBE359-BFDC-4613-8BF2-C5E300945F0A',
  'urn:oid:1.2.3',
  'urn:oid:1.02',
  'http://example.org/x',
  'has space',
  'Patient/p1',
  'Practitioner/pr1',
  'Foo/1',
  'Organization?identifier=x',
  '#org1',
  '#',
  'http://example.org/fhir/Patient/1',
  'aGVsbG8=',
  'aGVsbG8',
  'x'.repeat(65),
  'valid-id.1',
  'home',
  'resolved',
  'entered-in-error',
  'true',
  '1.5',
];

const NUMBERS: readonly number[] = [0, 1, -1, 1.5, 42, 2147483648, 1e21, -0.0001];

const EXTENSIONS: readonly Json[] = [
  { url: 'http://example.org/ext', valueString: 'fine' },
  { url: 'http://example.org/ext' },
  { url: 'http://example.org/ext', valueString: 'x', extension: [{ url: 'inner', valueInteger: 1 }] },
  { valueString: 'no url' },
  { url: 'http://example.org/ext', valueFoo: 1 },
  { url: 'http://example.org/ext', valueInteger: '1' },
  { url: 'http://example.org/ext', valueInteger: 1.5 },
  { url: 'has space', valueBoolean: true },
  { url: 'http://example.org/ext', valueReference: { reference: 'Foo/1' } },
  { url: 'http://example.org/ext', valueString: 'a', valueBoolean: true },
  { url: 'http://example.org/ext', extension: [{ url: 'inner' }] },
  { url: 'http://example.org/ext', valueCodeableConcept: {} },
  { url: 'http://example.org/ext', valuePeriod: { start: 'yesterday' } },
];

/** Keys added to objects: unknown, inherited, choice variants, primitive extensions, elements with invariants. */
const ADDED: readonly (readonly [string, Json])[] = [
  ['foo', 'bar'],
  ['constructor', { name: 'x' }],
  ['__proto__', { polluted: 'yes' }],
  ['toString', 'x'],
  ['hasOwnProperty', 1],
  ['_constructor', { id: 'x' }],
  ['resourceType', 'Patient'],
  ['valueFoo', 1],
  ['valueString', 'second choice'],
  ['valueBoolean', true],
  ['valueQuantity', { value: 1 }],
  ['effectiveDateTime', '2021-05-06'],
  ['abatementString', 'later'],
  ['onsetString', 'childhood'],
  ['deceasedBoolean', false],
  ['multipleBirthBoolean', true],
  ['_status', { extension: [{ url: 'http://example.org/ext', valueString: 'x' }] }],
  ['_status', { id: 'x' }],
  ['_gender', {}],
  ['_birthDate', { extension: [{ url: 'http://example.org/ext' }] }],
  ['_given', [null, { id: 'g' }]],
  ['dataAbsentReason', { text: 'unknown' }],
  ['use', 'home'],
  ['clinicalStatus', { text: 'active' }],
  [
    'verificationStatus',
    {
      coding: [
        { system: 'http://terminology.hl7.org/CodeSystem/condition-ver-status', code: 'entered-in-error' },
      ],
    },
  ],
  ['durationUnit', 'h'],
  ['duration', -1],
  ['period', 2],
  ['countMax', 3],
  ['onBehalfOf', { reference: 'Organization/o1' }],
  ['contained', [{ resourceType: 'Organization', id: 'c2', contained: [{ resourceType: 'Organization' }] }]],
  [
    'contained',
    [{ resourceType: 'Organization', id: 'c3', meta: { versionId: '1', security: [{ code: 'R' }] } }],
  ],
  ['contained', [{ resourceType: 'Nonsense', id: 'c4' }]],
  ['contained', [{ id: 'c5' }]],
  ['contained', [{ resourceType: 'Organization', id: 'c6', name: 'Unreferenced' }]],
  ['meta', { versionId: '1', lastUpdated: '2021-05-06T10:20:30Z', tag: [{ code: 'x' }] }],
  ['text', { status: 'generated', div: '<div>x</div>' }],
  ['text', { status: 'generated' }],
  ['extension', []],
  ['modifierExtension', [{ url: 'http://example.org/m', valueBoolean: true }]],
  ['id', 'bad id!'],
  ['reference', 'Foo/1'],
  ['reference', 'urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0a'],
  ['low', { value: 1 }],
  ['request', { method: 'GET', url: 'Patient' }],
  ['search', { mode: 'match' }],
  ['total', 1],
  ['value', 5],
  ['unit', 'mg'],
  ['component', [{ code: { text: 'x' }, valueString: 'y' }]],
];

const KINDS = [
  'delete',
  'number',
  'string',
  'boolean',
  'null',
  'emptyObject',
  'emptyArray',
  'wrap',
  'unwrap',
  'add',
  'extension',
  'renameChoice',
  'duplicate',
] as const;

const CHOICE =
  /^(value|effective|onset|abatement|deceased|multipleBirth|medication|scheduled|answer|asNeeded|bounds|dose|allowed|occurrence|performed|timing|born|age|serviced|location)([A-Z][A-Za-z]*)$/;
const SUFFIXES = [
  'String',
  'Integer',
  'Boolean',
  'Quantity',
  'CodeableConcept',
  'DateTime',
  'Period',
  'Foo',
  'Reference',
];

export interface Mutation {
  kind: (typeof KINDS)[number];
  at: number;
  pick: number;
}

/** Applies `mutation` in place to `resource`: one change at one place picked by `at`. */
export function mutate(resource: JsonObject, mutation: Mutation): void {
  const { all, objects } = slots(resource);
  const { kind, at, pick } = mutation;
  const choose = <T>(items: readonly T[]): T => items[pick % items.length]!;
  if (kind === 'add' || kind === 'extension') {
    // The root half of the time, so resource-level elements and invariants get their share.
    const object = at % 2 === 0 ? resource : objects[at % objects.length]!;
    if (kind === 'add') {
      const [key, value] = choose(ADDED);
      setOwn(object, key, structuredClone(value));
    } else {
      const list = Array.isArray(object.extension) ? object.extension : [];
      list.push(structuredClone(choose(EXTENSIONS)));
      object.extension = list;
    }
    return;
  }
  if (all.length === 0) return;
  const slot = all[at % all.length]!;
  const value = read(slot);
  switch (kind) {
    case 'delete':
      if (Array.isArray(slot.holder)) slot.holder.splice(slot.key as number, 1);
      else delete slot.holder[slot.key as string];
      return;
    case 'number':
      return write(slot, choose(NUMBERS));
    case 'string':
      return write(slot, choose(STRINGS));
    case 'boolean':
      return write(slot, pick % 2 === 0);
    case 'null':
      return write(slot, null);
    case 'emptyObject':
      return write(slot, {});
    case 'emptyArray':
      return write(slot, []);
    case 'wrap':
      return write(slot, [value]);
    case 'unwrap':
      return write(slot, Array.isArray(value) ? (value[0] ?? null) : value);
    case 'duplicate':
      if (Array.isArray(value)) value.push(structuredClone(value[0] ?? null));
      else if (Array.isArray(slot.holder)) slot.holder.push(structuredClone(value));
      else write(slot, [value, structuredClone(value)]);
      return;
    case 'renameChoice': {
      if (Array.isArray(slot.holder)) return;
      const match = CHOICE.exec(slot.key as string);
      const name = match ? match[1]! : 'value';
      delete slot.holder[slot.key as string];
      setOwn(slot.holder, name + choose(SUFFIXES), value);
      return;
    }
    default:
      return;
  }
}

/** 1 to 3 mutations of a copy of one of `seeds`. */
export function mutants(seeds: readonly FhirResource[]): fc.Arbitrary<FhirResource> {
  const mutation = fc.record({ kind: fc.constantFrom(...KINDS), at: fc.nat(), pick: fc.nat() });
  return fc
    .tuple(fc.nat({ max: seeds.length - 1 }), fc.array(mutation, { minLength: 1, maxLength: 3 }))
    .map(([index, mutations]) => {
      const copy = structuredClone(seeds[index]!) as unknown as JsonObject;
      for (const m of mutations) mutate(copy, m);
      return copy as unknown as FhirResource;
    });
}
