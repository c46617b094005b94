/**
 * Deterministic synthetic FHIR R4 data shaped like Synthea output: per patient about 400 resources,
 * Observation-heavy, with Synthea's mix of types and typical serialized sizes.
 */

/** Per-patient counts, scaled from the Synthea R4 sample (38,970 resources over 100 patients). */
const MIX: ReadonlyArray<readonly [string, number]> = [
  ['Observation', 172],
  ['Claim', 64],
  ['Encounter', 39],
  ['ExplanationOfBenefit', 39],
  ['MedicationRequest', 25],
  ['Procedure', 25],
  ['Immunization', 13],
  ['DiagnosticReport', 9],
  ['Condition', 7],
  ['CareTeam', 3],
  ['CarePlan', 3],
  ['AllergyIntolerance', 1],
];

/** Resources generated per patient (the Patient included). */
export const RESOURCES_PER_PATIENT = MIX.reduce((sum, [, n]) => sum + n, 0) + 1;

/** A small, fast, seedable PRNG (mulberry32). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function uuid(rand: () => number): string {
  const hex = (n: number) => Array.from({ length: n }, () => Math.floor(rand() * 16).toString(16)).join('');
  return `${hex(8)}-${hex(4)}-4${hex(3)}-a${hex(3)}-${hex(12)}`;
}

const GIVEN = ['Abram', 'Aleta', 'Alfredo', 'Alyce', 'Arnette', 'Arturo', 'Ashanti', 'Ben', 'Bernie', 'Bibi'];
const FAMILY = [
  'Lemke',
  'Wintheiser',
  'Alaniz',
  'Walsh',
  'Bednar',
  'Yundt',
  'Kuphal',
  'Bergstrom',
  'Smitham',
];
const LOINC = [
  ['8302-2', 'Body Height', 'cm'],
  ['29463-7', 'Body Weight', 'kg'],
  ['39156-5', 'Body Mass Index', 'kg/m2'],
  ['8867-4', 'Heart rate', '/min'],
  ['9279-1', 'Respiratory rate', '/min'],
  ['2339-0', 'Glucose', 'mg/dL'],
] as const;

const SELECTIVE_LOINC = ['2345-7', 'Glucose [Mass/volume] in Serum or Plasma', 'mg/dL'] as const;

function pick<T>(rand: () => number, items: readonly T[]): T {
  return items[Math.floor(rand() * items.length)]!;
}

function isoDate(rand: () => number): string {
  const ms = Date.UTC(1990, 0, 1) + Math.floor(rand() * 30 * 365 * 86_400_000);
  return new Date(ms).toISOString();
}

function coding(system: string, code: string, display: string) {
  return { coding: [{ system, code, display }], text: display };
}

function filler(rand: () => number, bytes: number): string {
  const words = ['patient', 'reported', 'history', 'stable', 'follow-up', 'normal', 'assessment', 'plan'];
  let out = '';
  while (out.length < bytes) out += `${pick(rand, words)} `;
  return out.slice(0, bytes);
}

/** One resource of `type` for patient `patientId`, roughly Synthea's size for the type. */
function resourceOf(
  type: string,
  patientId: string,
  encounterId: string,
  rand: () => number,
): Record<string, unknown> {
  const id = uuid(rand);
  const subject = { reference: `Patient/${patientId}` };
  const encounter = { reference: `Encounter/${encounterId}` };
  const when = isoDate(rand);
  switch (type) {
    case 'Observation': {
      const picked = pick(rand, LOINC);
      // A selective code, about 1% of all resources (search benchmarks): an eighth of the glucose
      // results, chosen by the id so that the random stream (and every other value) is unchanged.
      const [code, display, unit] =
        picked[0] === '2339-0' && (id[0] === '0' || id[0] === '1') ? SELECTIVE_LOINC : picked;
      return {
        resourceType: 'Observation',
        id,
        status: 'final',
        category: [
          coding('http://terminology.hl7.org/CodeSystem/observation-category', 'vital-signs', 'vital-signs'),
        ],
        code: coding('http://loinc.org', code, display),
        subject,
        encounter,
        effectiveDateTime: when,
        issued: when,
        valueQuantity: {
          value: Math.round(rand() * 2000) / 10,
          unit,
          system: 'http://unitsofmeasure.org',
          code: unit,
        },
      };
    }
    case 'Encounter':
      return {
        resourceType: 'Encounter',
        id: encounterId,
        status: 'finished',
        class: { system: 'http://terminology.hl7.org/CodeSystem/v3-ActCode', code: 'AMB' },
        type: [coding('http://snomed.info/sct', '185349003', 'Encounter for check up')],
        subject,
        participant: [{ individual: { reference: `Practitioner/${uuid(rand)}`, display: 'Dr. Example' } }],
        period: { start: when, end: when },
        serviceProvider: { reference: `Organization/${uuid(rand)}` },
        text: {
          status: 'generated',
          div: `<div xmlns="http://www.w3.org/1999/xhtml">${filler(rand, 400)}</div>`,
        },
      };
    case 'Claim':
      return {
        resourceType: 'Claim',
        id,
        status: 'active',
        type: coding('http://terminology.hl7.org/CodeSystem/claim-type', 'professional', 'professional'),
        use: 'claim',
        patient: subject,
        billablePeriod: { start: when, end: when },
        created: when,
        provider: { reference: `Organization/${uuid(rand)}` },
        priority: coding('http://terminology.hl7.org/CodeSystem/processpriority', 'normal', 'normal'),
        insurance: [{ sequence: 1, focal: true, coverage: { display: 'Medicaid' } }],
        item: [
          {
            sequence: 1,
            productOrService: coding('http://snomed.info/sct', '185349003', filler(rand, 300)),
            encounter: [encounter],
          },
        ],
        total: { value: Math.round(rand() * 100000) / 100, currency: 'USD' },
      };
    case 'ExplanationOfBenefit':
      return {
        resourceType: 'ExplanationOfBenefit',
        id,
        status: 'active',
        type: coding('http://terminology.hl7.org/CodeSystem/claim-type', 'professional', 'professional'),
        use: 'claim',
        patient: subject,
        billablePeriod: { start: when, end: when },
        created: when,
        insurer: { display: 'Medicaid' },
        provider: { reference: `Practitioner/${uuid(rand)}` },
        claim: { reference: `Claim/${uuid(rand)}` },
        outcome: 'complete',
        careTeam: [{ sequence: 1, provider: { reference: `Practitioner/${uuid(rand)}` } }],
        insurance: [{ focal: true, coverage: { display: 'Medicaid' } }],
        item: [
          {
            sequence: 1,
            productOrService: coding('http://snomed.info/sct', '185349003', 'Encounter for check up'),
            encounter: [encounter],
            servicedPeriod: { start: when, end: when },
          },
        ],
        text: {
          status: 'generated',
          div: `<div xmlns="http://www.w3.org/1999/xhtml">${filler(rand, 3800)}</div>`,
        },
      };
    case 'MedicationRequest':
      return {
        resourceType: 'MedicationRequest',
        id,
        status: 'stopped',
        intent: 'order',
        medicationCodeableConcept: coding(
          'http://www.nlm.nih.gov/research/umls/rxnorm',
          '834061',
          'Penicillin V',
        ),
        subject,
        encounter,
        authoredOn: when,
        requester: { reference: `Practitioner/${uuid(rand)}` },
        dosageInstruction: [{ sequence: 1, text: filler(rand, 120) }],
      };
    case 'Procedure':
      return {
        resourceType: 'Procedure',
        id,
        status: 'completed',
        code: coding('http://snomed.info/sct', '430193006', 'Medication Reconciliation'),
        subject,
        encounter,
        performedPeriod: { start: when, end: when },
        note: [{ text: filler(rand, 150) }],
      };
    case 'Immunization':
      return {
        resourceType: 'Immunization',
        id,
        status: 'completed',
        vaccineCode: coding('http://hl7.org/fhir/sid/cvx', '140', 'Influenza, seasonal'),
        patient: subject,
        encounter,
        occurrenceDateTime: when,
        primarySource: true,
      };
    case 'DiagnosticReport':
      return {
        resourceType: 'DiagnosticReport',
        id,
        status: 'final',
        category: [coding('http://terminology.hl7.org/CodeSystem/v2-0074', 'LAB', 'Laboratory')],
        code: coding('http://loinc.org', '51990-0', 'Basic Metabolic Panel'),
        subject,
        encounter,
        effectiveDateTime: when,
        issued: when,
        result: Array.from({ length: 8 }, () => ({
          reference: `Observation/${uuid(rand)}`,
          display: 'Glucose',
        })),
        presentedForm: [
          { contentType: 'text/plain', data: Buffer.from(filler(rand, 300)).toString('base64') },
        ],
      };
    case 'Condition':
      return {
        resourceType: 'Condition',
        id,
        clinicalStatus: coding(
          'http://terminology.hl7.org/CodeSystem/condition-clinical',
          'resolved',
          'resolved',
        ),
        verificationStatus: coding(
          'http://terminology.hl7.org/CodeSystem/condition-ver-status',
          'confirmed',
          'confirmed',
        ),
        code: coding('http://snomed.info/sct', '444814009', 'Viral sinusitis (disorder)'),
        subject,
        encounter,
        onsetDateTime: when,
        recordedDate: when,
        note: [{ text: filler(rand, 150) }],
      };
    case 'CareTeam':
      return {
        resourceType: 'CareTeam',
        id,
        status: 'active',
        subject,
        encounter,
        period: { start: when },
        participant: [
          { member: subject, role: [coding('http://snomed.info/sct', '116154003', 'Patient')] },
          {
            member: { reference: `Practitioner/${uuid(rand)}` },
            role: [coding('http://snomed.info/sct', '223366009', 'Healthcare professional')],
          },
        ],
        note: [{ text: filler(rand, 500) }],
      };
    case 'CarePlan':
      return {
        resourceType: 'CarePlan',
        id,
        status: 'active',
        intent: 'order',
        category: [coding('http://snomed.info/sct', '326051000000105', 'Self care')],
        subject,
        encounter,
        period: { start: when },
        activity: [{ detail: { status: 'in-progress', description: filler(rand, 700) } }],
      };
    case 'AllergyIntolerance':
      return {
        resourceType: 'AllergyIntolerance',
        id,
        clinicalStatus: coding(
          'http://terminology.hl7.org/CodeSystem/allergyintolerance-clinical',
          'active',
          'Active',
        ),
        type: 'allergy',
        category: ['food'],
        criticality: 'low',
        code: coding('http://snomed.info/sct', '300916003', 'Latex allergy'),
        patient: subject,
        recordedDate: when,
      };
    default:
      throw new Error(`no generator for ${type}`);
  }
}

function patientOf(id: string, rand: () => number): Record<string, unknown> {
  return {
    resourceType: 'Patient',
    id,
    name: [{ use: 'official', family: pick(rand, FAMILY), given: [pick(rand, GIVEN)] }],
    gender: rand() < 0.5 ? 'male' : 'female',
    birthDate: isoDate(rand).slice(0, 10),
    address: [{ line: ['123 Main St'], city: 'Boston', state: 'MA', postalCode: '02110', country: 'US' }],
    telecom: [{ system: 'phone', value: '555-0100', use: 'home' }],
    identifier: [{ system: 'https://github.com/synthetichealth/synthea', value: id }],
    text: {
      status: 'generated',
      div: `<div xmlns="http://www.w3.org/1999/xhtml">${filler(rand, 1500)}</div>`,
    },
  };
}

/**
 * Yields every resource of `patients` synthetic patients, patient by patient (each Patient first),
 * deterministic from `seed`.
 */
export function* generatePatients(patients: number, seed = 42): Generator<Record<string, unknown>> {
  const rand = prng(seed);
  for (let p = 0; p < patients; p++) {
    const patientId = uuid(rand);
    yield patientOf(patientId, rand);
    const encounters = Array.from({ length: 39 }, () => uuid(rand));
    for (const [type, count] of MIX) {
      for (let i = 0; i < count; i++) {
        const encounterId =
          type === 'Encounter' ? encounters[i % encounters.length]! : pick(rand, encounters);
        yield resourceOf(type, patientId, encounterId, rand);
      }
    }
  }
}
