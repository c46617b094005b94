import { describe, expect, it } from 'vitest';
import { applyFhirPathPatch } from '../../src/fhir/patch/fhirpath-patch.js';
import { applyJsonPatch } from '../../src/fhir/patch/json-patch.js';
import { jsonSizeUpTo } from '../../src/fhir/patch/patch-limits.js';
import type { FhirResource } from '../../src/storage/types.js';

const op = (type: string, path: string, rest: Record<string, unknown> = {}) => {
  const part: Record<string, unknown>[] = [
    { name: 'type', valueCode: type },
    { name: 'path', valueString: path },
  ];
  for (const [name, value] of Object.entries(rest)) {
    if (name === 'name') part.push({ name, valueString: value });
    else if (name === 'index' || name === 'source' || name === 'destination')
      part.push({ name, valueInteger: value });
    else part.push({ name: 'value', [name]: value });
  }
  return { name: 'operation', part };
};
const apply = (resource: FhirResource, ...operations: Record<string, unknown>[]) =>
  applyFhirPathPatch(resource, { resourceType: 'Parameters', parameter: operations });

const patient = (): FhirResource => ({
  resourceType: 'Patient',
  id: 'p',
  name: [
    { family: 'A', given: ['x', 'y', 'x'], _given: [null, { id: 'g2' }, null] },
    { family: 'B', given: ['z'] },
  ],
  identifier: [{ system: 's', value: '1' }],
  active: true,
});

async function failure(work: Promise<unknown>): Promise<{ status: number; code: string }> {
  try {
    await work;
  } catch (error) {
    return error as { status: number; code: string };
  }
  throw new Error('expected a failure');
}

describe('FHIRPath Patch', () => {
  it('leaves its input alone and answers a changed copy', async () => {
    const input = patient();
    const out = (await apply(
      input,
      op('replace', 'Patient.active', { valueBoolean: false }),
    )) as FhirResource;
    expect(out.active).toBe(false);
    expect(input.active).toBe(true);
  });

  it('selects with indexes, where() on primitives, first() and last(), across the collection', async () => {
    const deleted = (await apply(
      patient(),
      op('delete', "Patient.name[0].given.where($this = 'y')"),
      op('replace', 'Patient.name.given.last()', { valueString: 'w' }),
      op('replace', 'Patient.name.first().family', { valueString: 'C' }),
    )) as { name: { family: string; given: string[]; _given?: unknown[] }[] };
    expect(deleted.name[0]).toEqual({ family: 'C', given: ['x', 'x'], _given: [null, null] });
    expect(deleted.name[1]!.given).toEqual(['w']);
    // `given[2]` counts every given of every name.
    const third = (await apply(patient(), op('delete', 'Patient.name.given[3]'))) as {
      name: { given?: string[] }[];
    };
    expect(third.name[1]!.given).toBeUndefined();
  });

  it('inserts and moves list items, keeping primitive extensions in step', async () => {
    const out = (await apply(
      patient(),
      op('insert', 'Patient.name[0].given', { index: 1, valueString: 'n' }),
      op('move', 'Patient.name[0].given', { source: 2, destination: 0 }),
    )) as { name: { given: string[]; _given: unknown[] }[] };
    expect(out.name[0]!.given).toEqual(['y', 'x', 'n', 'x']);
    expect(out.name[0]!._given).toEqual([{ id: 'g2' }, null, null, null]);
    const fresh = (await apply(
      patient(),
      op('insert', 'Patient.telecom', { index: 0, valueContactPoint: { system: 'phone', value: '1' } }),
    )) as { telecom: unknown[] };
    expect(fresh.telecom).toEqual([{ system: 'phone', value: '1' }]);
  });

  it('adds a list item, a single element, or a choice element under its typed name', async () => {
    const out = (await apply(
      patient(),
      op('add', 'Patient', { name: 'identifier', valueIdentifier: { value: '2' } }),
      op('add', 'Patient', { name: 'birthDate', valueDate: '2000-01-01' }),
      op('add', 'Patient', { name: 'multipleBirth', valueInteger: 2 }),
      op('add', 'Patient', { name: 'photo', valueAttachment: { url: 'http://x' } }),
    )) as Record<string, unknown>;
    expect(out.identifier).toHaveLength(2);
    expect(out.birthDate).toBe('2000-01-01');
    expect(out.multipleBirthInteger).toBe(2);
    expect(out.photo).toEqual([{ url: 'http://x' }]);
  });

  it('answers 422 for what cannot apply and 400 for what is malformed', async () => {
    expect(
      await failure(apply(patient(), op('add', 'Patient', { name: 'active', valueBoolean: false }))),
    ).toMatchObject({
      status: 422,
    });
    expect(
      await failure(apply(patient(), op('replace', 'Patient.name.family', { valueString: 'x' }))),
    ).toMatchObject({
      status: 422,
    });
    expect(await failure(apply(patient(), op('delete', 'Patient.name.given.count()')))).toMatchObject({
      status: 422,
    });
    expect(await failure(apply(patient(), op('delete', 'Patient')))).toMatchObject({ status: 422 });
    expect(
      await failure(apply(patient(), op('insert', 'Patient.name', { index: 5, valueHumanName: {} }))),
    ).toMatchObject({ status: 422 });
    expect(
      await failure(apply(patient(), op('insert', 'Patient.active', { index: 0, valueBoolean: true }))),
    ).toMatchObject({ status: 422 });
    expect(await failure(apply(patient(), op('delete', 'Patient.name.(')))).toMatchObject({ status: 400 });
    expect(await failure(apply(patient(), op('remove', 'Patient.name')))).toMatchObject({ status: 400 });
    expect(await failure(apply(patient(), op('delete', `Patient${'.name'.repeat(20_000)}`)))).toMatchObject({
      status: 400,
    });
    expect(
      await failure(apply(patient(), op('add', 'Patient', { name: '__proto__', valueString: 'x' }))),
    ).toMatchObject({
      status: 400,
    });
    expect(
      await failure(
        applyFhirPathPatch(patient(), { resourceType: 'Parameters', parameter: [{ name: 'x' }] }),
      ),
    ).toMatchObject({ status: 400, code: 'ERR_FHIR_INVALID' });
  });

  it('tells a choice element from an element whose name starts alike', async () => {
    const obs: FhirResource = {
      resourceType: 'Observation',
      statusReason: 'x',
      code: { text: 'c' },
      valueQuantity: { value: 1 },
    };
    const out = (await apply(
      obs,
      op('add', 'Observation', { name: 'status', valueCode: 'final' }),
      op('replace', 'Observation.value', { valueString: 'high' }),
    )) as Record<string, unknown>;
    expect(out).toMatchObject({ status: 'final', statusReason: 'x', valueString: 'high' });
    expect(out.valueQuantity).toBeUndefined();
  });

  it('deletes nothing when the path selects nothing', async () => {
    expect(await apply(patient(), op('delete', 'Patient.telecom'))).toEqual(patient());
  });
});

describe('JSON Patch', () => {
  it('applies to a copy, and tells a malformed document (400) from one that cannot apply (422)', () => {
    const input = patient();
    const out = applyJsonPatch(input, [{ op: 'copy', from: '/name/0/family', path: '/name/1/family' }]) as {
      name: { family: string }[];
    };
    expect(out.name[1]!.family).toBe('A');
    expect((input.name as { family: string }[])[1]!.family).toBe('B');
    expect(() => applyJsonPatch(input, {})).toThrow(expect.objectContaining({ status: 400 }));
    expect(() => applyJsonPatch(input, [{ op: 'add', path: 'name' }])).toThrow(
      expect.objectContaining({ status: 400 }),
    );
    expect(() => applyJsonPatch(input, [{ op: 'remove', path: '/telecom' }])).toThrow(
      expect.objectContaining({ status: 422 }),
    );
    expect(() => applyJsonPatch(input, [{ op: 'add', path: '/__proto__/x', value: 1 }])).toThrow(
      expect.objectContaining({ status: 400 }),
    );
    expect(() =>
      applyJsonPatch(input, [{ op: 'add', path: '/constructor/prototype/x', value: 1 }]),
    ).toThrow();
    expect(({} as Record<string, unknown>).x).toBeUndefined();
  });
});

describe('JSON Patch move and copy', () => {
  it('refuse a from that points at nothing (422), naming the operation that failed', () => {
    const ok = { op: 'test', path: '/active', value: true };
    for (const from of ['/telecom', '/name/5', '/name/x', '/active/deeper', 'name', '/__proto__']) {
      for (const verb of ['move', 'copy']) {
        expect(
          () => applyJsonPatch(patient(), [ok, ok, { op: verb, from, path: '/x' }]),
          `${verb} ${from}`,
        ).toThrow(
          expect.objectContaining({ status: 422, message: expect.stringContaining('(operation 2)') }),
        );
      }
    }
    // A malformed operation later in the list is named by its own index too.
    expect(() => applyJsonPatch(patient(), [ok, { op: 'jump', path: '/x' }])).toThrow(
      expect.objectContaining({ status: 400, message: expect.stringContaining('(operation 1)') }),
    );
  });

  it('move and copy what `from` points at, escaped keys and list items included', () => {
    const input = { ...patient(), extension: [{ url: 'a/b~c', valueString: 'v' }], 'a/b': { 'c~d': 1 } };
    const out = applyJsonPatch(input, [
      { op: 'copy', from: '/a~1b/c~0d', path: '/copied' },
      { op: 'move', from: '/name/1', path: '/name/0' },
      { op: 'copy', from: '', path: '/contained' },
    ]) as Record<string, unknown> & { name: { family: string }[]; contained: { copied?: number } };
    expect(out.copied).toBe(1);
    expect(out.name.map((n) => n.family)).toEqual(['B', 'A']);
    expect(out.contained.copied).toBe(1);
  });
});

describe('jsonSizeUpTo', () => {
  it("measures a value's JSON text in bytes", () => {
    const values: unknown[] = [
      patient(),
      { a: [1, -2.5, 1e21, true, false, null, 'é€'], b: { c: 'x"y' }, ü: [[{ d: [] }]] },
      'text',
      42,
      [null],
    ];
    for (const value of values) {
      // Escapes are not counted: `"` inside a string is one byte here, two in JSON.
      const text = JSON.stringify(value).replaceAll('\\"', '"');
      expect(jsonSizeUpTo(value, Infinity), text).toBe(Buffer.byteLength(text));
    }
  });

  it('stops once over the limit, with an answer over it', () => {
    const big = { list: Array.from({ length: 10_000 }, (_, i) => ({ value: `item ${i}` })) };
    const whole = jsonSizeUpTo(big, Infinity);
    expect(whole).toBe(JSON.stringify(big).length);
    const cut = jsonSizeUpTo(big, 1000);
    expect(cut).toBeGreaterThan(1000);
    expect(cut).toBeLessThan(whole);
  });
});

describe('FHIRPath Patch values and their elements', () => {
  const request = (): FhirResource => ({
    resourceType: 'MedicationRequest',
    id: 'm',
    status: 'active',
    intent: 'order',
    subject: { reference: 'Patient/p' },
    dispenseRequest: { numberOfRepeatsAllowed: 1 },
  });

  it('take a profile of Quantity where a Quantity is wanted, and no other complex type', async () => {
    const out = (await apply(
      request(),
      op('add', 'MedicationRequest.dispenseRequest', {
        name: 'expectedSupplyDuration',
        valueQuantity: { value: 30, unit: 'd' },
      }),
    )) as { dispenseRequest: Record<string, unknown> };
    expect(out.dispenseRequest.expectedSupplyDuration).toEqual({ value: 30, unit: 'd' });
    const misfit = await failure(
      apply(
        request(),
        op('add', 'MedicationRequest.dispenseRequest', {
          name: 'expectedSupplyDuration',
          valueRange: { low: { value: 1 } },
        }),
      ),
    );
    expect(misfit).toMatchObject({ status: 422, expression: ['Parameters.parameter[0]'] });
  });

  it('keep the JSON type of a primitive element, an enumerated code included', async () => {
    const integer = await failure(
      apply(
        request(),
        op('replace', 'MedicationRequest.dispenseRequest.numberOfRepeatsAllowed', { valueString: '2' }),
      ),
    );
    expect(integer.status).toBe(422);
    const code = await failure(
      apply(request(), op('replace', 'MedicationRequest.status', { valueBoolean: true })),
    );
    expect(code.status).toBe(422);
    const fits = (await apply(
      request(),
      op('replace', 'MedicationRequest.status', { valueCode: 'stopped' }),
      op('replace', 'MedicationRequest.dispenseRequest.numberOfRepeatsAllowed', { valueUnsignedInt: 2 }),
    )) as { status: string; dispenseRequest: { numberOfRepeatsAllowed: number } };
    expect([fits.status, fits.dispenseRequest.numberOfRepeatsAllowed]).toEqual(['stopped', 2]);
  });

  it('leave an element the schema does not know to validation', async () => {
    const out = (await apply(
      request(),
      op('add', 'MedicationRequest', { name: 'madeUp', valueBoolean: true }),
    )) as {
      madeUp: boolean;
    };
    expect(out.madeUp).toBe(true);
  });
});
