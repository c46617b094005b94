import type { FhirResource } from '../../../src/storage/types.js';

/**
 * Valid R4 resources that reach many parts of the validator: extensions (nested, on primitives'
 * parents, with several value types), choice elements, backbone elements, contained resources
 * referenced as `#id`, nested Resource elements (Bundle, Parameters), `contentReference` elements
 * (Questionnaire.item.item), Timing, Money, positiveInt / unsignedInt / decimal / base64Binary /
 * instant / time / oid / uuid values, and the invariants of each (ext-1, dom-*, obs-3, obs-6,
 * obs-7, con-4, con-5, ait-1, ait-2, pat-1, org-2, org-3, tim-*, ctm-1, bdl-*, que-*). The
 * reference validator finds no issue in any of them (asserted by the differential test).
 */
export function validResources(): FhirResource[] {
  const narrative = {
    status: 'generated',
    div: '<div xmlns="http://www.w3.org/1999/xhtml">A narrative</div>',
  };
  const loinc = (code: string, display: string) => ({
    coding: [{ system: 'http://loinc.org', code, display }],
    text: display,
  });
  return [
    {
      resourceType: 'Patient',
      id: 'p1',
      meta: { profile: ['http://hl7.org/fhir/us/core/StructureDefinition/us-core-patient'] },
      text: narrative,
      extension: [
        {
          url: 'http://hl7.org/fhir/us/core/StructureDefinition/us-core-race',
          extension: [
            {
              url: 'ombCategory',
              valueCoding: { system: 'urn:oid:2.16.840.1.113883.6.238', code: '2106-3', display: 'White' },
            },
            { url: 'text', valueString: 'White' },
          ],
        },
        {
          url: 'http://hl7.org/fhir/StructureDefinition/patient-birthPlace',
          valueAddress: { city: 'Boston' },
        },
        {
          url: 'http://synthetichealth.github.io/synthea/disability-adjusted-life-years',
          valueDecimal: 0.25,
        },
      ],
      identifier: [
        {
          system: 'http://hospital.smarthealthit.org',
          value: '1234',
          type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'MR' }] },
        },
      ],
      active: true,
      name: [{ use: 'official', family: 'Lemke', given: ['Abram', 'J'], prefix: ['Mr.'] }],
      telecom: [{ system: 'phone', value: '555-0100', use: 'home', rank: 1 }],
      gender: 'male',
      birthDate: '1970-01-31',
      deceasedDateTime: '2020-05-06T10:20:30-05:00',
      address: [
        {
          extension: [
            {
              url: 'http://hl7.org/fhir/StructureDefinition/geolocation',
              extension: [
                { url: 'latitude', valueDecimal: 42.36 },
                { url: 'longitude', valueDecimal: -71.05 },
              ],
            },
          ],
          line: ['123 Main St'],
          city: 'Boston',
          state: 'MA',
          postalCode: '02110',
          country: 'US',
          period: { start: '2000', end: '2010-06' },
        },
      ],
      maritalStatus: {
        coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v3-MaritalStatus', code: 'M' }],
      },
      multipleBirthInteger: 2,
      contact: [{ relationship: [{ text: 'Mother' }], name: { text: 'Jane Lemke' } }],
      communication: [{ language: { text: 'English' }, preferred: true }],
      managingOrganization: { reference: '#org1', display: 'Contained' },
      contained: [{ resourceType: 'Organization', id: 'org1', name: 'Contained organization' }],
      generalPractitioner: [{ reference: 'Practitioner/pr1' }],
      link: [{ other: { reference: 'RelatedPerson/rp1' }, type: 'seealso' }],
    },
    {
      resourceType: 'Observation',
      id: 'bp',
      status: 'final',
      category: [
        {
          coding: [
            { system: 'http://terminology.hl7.org/CodeSystem/observation-category', code: 'vital-signs' },
          ],
        },
      ],
      code: loinc('85354-9', 'Blood pressure panel'),
      subject: { reference: 'Patient/p1' },
      encounter: { reference: 'Encounter/e1' },
      effectiveDateTime: '2021-05-06T10:20:30.123+02:00',
      issued: '2021-05-06T10:20:30.123Z',
      performer: [{ reference: 'Practitioner?identifier=http://hl7.org/fhir/sid/us-npi|9999' }],
      component: [
        {
          code: loinc('8480-6', 'Systolic blood pressure'),
          valueQuantity: { value: 120, unit: 'mm[Hg]', system: 'http://unitsofmeasure.org', code: 'mm[Hg]' },
        },
        {
          code: loinc('8462-4', 'Diastolic blood pressure'),
          valueQuantity: { value: 80, unit: 'mm[Hg]', system: 'http://unitsofmeasure.org', code: 'mm[Hg]' },
          referenceRange: [{ low: { value: 60 }, high: { value: 90 } }],
        },
      ],
    },
    {
      resourceType: 'Observation',
      id: 'glucose',
      status: 'amended',
      code: loinc('2339-0', 'Glucose'),
      subject: { reference: 'Patient/p1', display: 'Abram' },
      effectivePeriod: { start: '2021-05-06', end: '2021-05-07' },
      valueQuantity: { value: 5.6, unit: 'mmol/L', system: 'http://unitsofmeasure.org', code: 'mmol/L' },
      interpretation: [{ text: 'normal' }],
      referenceRange: [{ text: 'below 7' }, { low: { value: 3.9 }, age: { low: { value: 18 } } }],
      note: [{ authorString: 'Lab', time: '2021-05-06T10:20:30Z', text: '**fasting**' }],
      hasMember: [{ reference: 'Observation/bp' }],
      component: [{ code: loinc('1-8', 'Other'), valueString: 'x' }],
    },
    {
      resourceType: 'Observation',
      id: 'absent',
      status: 'cancelled',
      code: { text: 'Smoking status' },
      dataAbsentReason: { text: 'asked but declined' },
    },
    {
      resourceType: 'Observation',
      id: 'sampled',
      status: 'final',
      code: { text: 'ECG' },
      valueSampledData: { origin: { value: 0 }, period: 10, dimensions: 1, data: '1 2 3 E' },
      device: { reference: 'Device/d1' },
    },
    {
      resourceType: 'Condition',
      id: 'c1',
      clinicalStatus: {
        coding: [{ system: 'http://terminology.hl7.org/CodeSystem/condition-clinical', code: 'resolved' }],
      },
      verificationStatus: {
        coding: [{ system: 'http://terminology.hl7.org/CodeSystem/condition-ver-status', code: 'confirmed' }],
      },
      category: [{ text: 'problem' }],
      code: { coding: [{ system: 'http://snomed.info/sct', code: '444814009', display: 'Viral sinusitis' }] },
      subject: { reference: 'Patient/p1' },
      onsetDateTime: '2019-01-01T10:00:00Z',
      abatementDateTime: '2019-01-15T10:00:00Z',
      recordedDate: '2019-01-01',
      stage: [{ summary: { text: 'mild' } }],
      evidence: [{ detail: [{ reference: 'Observation/glucose' }] }],
    },
    {
      resourceType: 'AllergyIntolerance',
      id: 'a1',
      clinicalStatus: {
        coding: [
          { system: 'http://terminology.hl7.org/CodeSystem/allergyintolerance-clinical', code: 'active' },
        ],
      },
      verificationStatus: {
        coding: [
          {
            system: 'http://terminology.hl7.org/CodeSystem/allergyintolerance-verification',
            code: 'confirmed',
          },
        ],
      },
      type: 'allergy',
      category: ['food', 'medication'],
      criticality: 'low',
      code: { text: 'Peanuts' },
      patient: { reference: 'Patient/p1' },
      onsetAge: { value: 4, unit: 'a', system: 'http://unitsofmeasure.org', code: 'a' },
      reaction: [{ manifestation: [{ text: 'Hives' }], severity: 'mild' }],
    },
    {
      resourceType: 'Organization',
      id: 'o1',
      active: true,
      type: [{ text: 'Provider' }],
      name: 'Hospital',
      alias: ['General'],
      telecom: [
        { system: 'phone', value: '555-0199', use: 'work' },
        { system: 'url', value: 'http://h.example' },
      ],
      address: [{ use: 'work', line: ['1 Hospital Rd'], city: 'Boston' }],
      contact: [{ purpose: { text: 'billing' }, name: { family: 'Smith' } }],
    },
    {
      resourceType: 'MedicationRequest',
      id: 'mr1',
      status: 'active',
      intent: 'order',
      medicationCodeableConcept: {
        coding: [
          { system: 'http://www.nlm.nih.gov/research/umls/rxnorm', code: '313782', display: 'Acetaminophen' },
        ],
      },
      subject: { reference: 'Patient/p1' },
      authoredOn: '2021-05-06T10:20:30Z',
      requester: { reference: 'Practitioner/pr1' },
      dosageInstruction: [
        {
          sequence: 1,
          text: 'Take one tablet twice a day',
          timing: {
            repeat: {
              boundsPeriod: { start: '2021-05-06' },
              frequency: 2,
              period: 1,
              periodUnit: 'd',
              duration: 0.5,
              durationUnit: 'h',
              timeOfDay: ['08:00:00', '20:00:00'],
              dayOfWeek: ['mon', 'tue'],
            },
          },
          asNeededBoolean: false,
          doseAndRate: [{ doseQuantity: { value: 1, unit: 'tablet' } }],
          maxDosePerPeriod: { numerator: { value: 4 }, denominator: { value: 1, unit: 'd' } },
        },
      ],
      dispenseRequest: {
        numberOfRepeatsAllowed: 0,
        quantity: { value: 60 },
        expectedSupplyDuration: { value: 30, unit: 'days', system: 'http://unitsofmeasure.org', code: 'd' },
      },
      substitution: { allowedBoolean: true },
    },
    {
      resourceType: 'CareTeam',
      id: 'ct1',
      status: 'active',
      subject: { reference: 'Patient/p1' },
      participant: [
        { role: [{ text: 'Doctor' }], member: { reference: 'Practitioner/pr1' } },
        {
          member: { reference: 'Practitioner/pr2' },
          onBehalfOf: { reference: 'Organization/o1' },
        },
        { member: { reference: 'Organization/o1' } },
      ],
      managingOrganization: [{ reference: 'Organization/o1' }],
    },
    {
      resourceType: 'CarePlan',
      id: 'cp1',
      status: 'active',
      intent: 'order',
      subject: { reference: 'Patient/p1' },
      activity: [
        { detail: { status: 'in-progress', code: { text: 'Walk' }, scheduledString: 'daily' } },
        { reference: { reference: 'ServiceRequest/sr1' } },
      ],
    },
    {
      resourceType: 'Claim',
      id: 'cl1',
      status: 'active',
      type: {
        coding: [{ system: 'http://terminology.hl7.org/CodeSystem/claim-type', code: 'institutional' }],
      },
      use: 'claim',
      patient: { reference: 'Patient/p1' },
      billablePeriod: { start: '2021-05-06T10:00:00Z', end: '2021-05-06T11:00:00Z' },
      created: '2021-05-06T11:00:00Z',
      provider: { reference: 'Organization/o1' },
      priority: {
        coding: [{ system: 'http://terminology.hl7.org/CodeSystem/processpriority', code: 'normal' }],
      },
      insurance: [{ sequence: 1, focal: true, coverage: { display: 'Cigna' } }],
      item: [
        {
          sequence: 1,
          productOrService: { text: 'Check up' },
          encounter: [{ reference: 'Encounter/e1' }],
          unitPrice: { value: 125.5, currency: 'USD' },
          net: { value: 125.5, currency: 'USD' },
        },
      ],
      total: { value: 125.5, currency: 'USD' },
    },
    {
      resourceType: 'Encounter',
      id: 'e1',
      status: 'finished',
      class: { system: 'http://terminology.hl7.org/CodeSystem/v3-ActCode', code: 'AMB' },
      type: [{ text: 'Check up' }],
      subject: { reference: 'Patient/p1' },
      participant: [
        { individual: { reference: 'Practitioner/pr1' }, period: { start: '2021-05-06T10:00:00Z' } },
      ],
      period: { start: '2021-05-06T10:00:00Z', end: '2021-05-06T11:00:00Z' },
      length: { value: 60, unit: 'min' },
      hospitalization: { dischargeDisposition: { text: 'home' } },
      location: [{ location: { reference: 'Location/l1' }, status: 'completed' }],
      serviceProvider: { reference: 'Organization/o1' },
    },
    {
      resourceType: 'DiagnosticReport',
      id: 'dr1',
      status: 'final',
      code: { text: 'Report' },
      subject: { reference: 'Patient/p1' },
      effectiveDateTime: '2021-05-06',
      result: [{ reference: 'Observation/glucose' }],
      presentedForm: [
        { contentType: 'text/plain', data: 'aGVsbG8gd29ybGQ=', size: 11, creation: '2021-05-06' },
      ],
    },
    {
      resourceType: 'ImagingStudy',
      id: 'is1',
      identifier: [{ system: 'urn:dicom:uid', value: 'urn:oid:1.2.840.99999999.1' }],
      status: 'available',
      subject: { reference: 'Patient/p1' },
      started: '2021-05-06T10:20:30Z',
      numberOfSeries: 1,
      numberOfInstances: 1,
      series: [
        {
          uid: '1.2.840.99999999.1.1',
          number: 0,
          modality: { system: 'http://dicom.nema.org/resources/ontology/DCM', code: 'DX' },
          instance: [{ uid: '1.2.840.99999999.1.1.1', sopClass: { code: '1.2.840.10008.5.1.4.1.1.1.1' } }],
        },
      ],
    },
    {
      resourceType: 'Device',
      id: 'd1',
      udiCarrier: [{ deviceIdentifier: '12345', carrierHRF: '(01)12345' }],
      status: 'active',
      distinctIdentifier: 'x',
      manufactureDate: '2020-01-01T00:00:00Z',
      type: { text: 'Stent' },
      patient: { reference: 'Patient/p1' },
    },
    {
      resourceType: 'Questionnaire',
      id: 'q1',
      url: 'http://example.org/Questionnaire/q1',
      name: 'Example',
      status: 'draft',
      item: [
        {
          linkId: '1',
          text: 'Group',
          type: 'group',
          item: [
            { linkId: '1.1', text: 'Smoker?', type: 'boolean' },
            {
              linkId: '1.2',
              text: 'How many?',
              type: 'integer',
              enableWhen: [{ question: '1.1', operator: '=', answerBoolean: true }],
              item: [{ linkId: '1.2.1', text: 'Since?', type: 'date' }],
            },
          ],
        },
        {
          linkId: '2',
          text: 'Colour',
          type: 'choice',
          answerOption: [{ valueCoding: { code: 'red' } }, { valueString: 'blue' }],
        },
      ],
    },
    {
      resourceType: 'Bundle',
      id: 'b1',
      type: 'transaction',
      entry: [
        {
          fullUrl: 'urn:uuid:61ebe359-bfdc-4613-8bf2-c5e300945f0a',
          resource: { resourceType: 'Patient', active: false },
          request: { method: 'POST', url: 'Patient' },
        },
        {
          resource: { resourceType: 'Observation', status: 'final', code: { text: 'x' }, valueBoolean: true },
          request: { method: 'PUT', url: 'Observation/o2' },
        },
        { request: { method: 'DELETE', url: 'Observation/o3' } },
      ],
    },
    {
      resourceType: 'Parameters',
      id: 'params',
      parameter: [
        { name: 'count', valueInteger: 3 },
        { name: 'resource', resource: { resourceType: 'Organization', name: 'Nested' } },
        {
          name: 'group',
          part: [
            { name: 'flag', valueBoolean: false },
            { name: 'when', valueTime: '10:20:30' },
          ],
        },
      ],
    },
    {
      resourceType: 'Practitioner',
      id: 'pr1',
      identifier: [{ system: 'http://hl7.org/fhir/sid/us-npi', value: '9999' }],
      name: [{ family: 'Smith', given: ['Ann'] }],
      gender: 'female',
      qualification: [{ code: { text: 'MD' }, period: { start: '2001' } }],
    },
    {
      resourceType: 'Provenance',
      id: 'prov1',
      target: [{ reference: 'Patient/p1' }],
      recorded: '2021-05-06T10:20:30.5Z',
      agent: [{ type: { text: 'author' }, who: { reference: 'Practitioner/pr1' } }],
    },
    {
      resourceType: 'Binary',
      id: 'bin1',
      contentType: 'text/plain',
      data: 'aGVsbG8=',
    },
  ];
}
