import { describe, expect, it } from 'vitest';
import {
  acceptsFhirJson,
  acceptsMediaType,
  checkFhirJsonWanted,
  isJsonFormat,
} from '../../src/http/fhir-format.js';
import { FhirError } from '../../src/http/http-error.js';

describe('acceptsFhirJson', () => {
  it('accepts no header, an empty one, JSON types and wildcards', () => {
    for (const accept of [
      undefined,
      '',
      'application/fhir+json',
      'application/json',
      'application/json+fhir',
      'APPLICATION/FHIR+JSON; fhirVersion=4.0',
      '*/*',
      'application/*',
      'application/fhir+xml, application/fhir+json;q=0.1',
      'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8',
      'application/json;q=oops',
    ])
      expect(acceptsFhirJson(accept), String(accept)).toBe(true);
  });

  it('refuses XML only, other types only, and JSON with q=0', () => {
    for (const accept of [
      'application/fhir+xml',
      'application/xml, text/xml',
      'text/html',
      'application/fhir+json;q=0',
      'application/fhir+xml, */*;q=0.0',
      'text/*',
    ])
      expect(acceptsFhirJson(accept), accept).toBe(false);
  });
});

describe('acceptsMediaType', () => {
  it('decides by the most specific matching range (q above 0), parameters and case aside', () => {
    const cases: [accept: string | undefined, type: string, accepted: boolean][] = [
      [undefined, 'application/pdf', true],
      ['', 'application/pdf', true],
      ['application/pdf', 'application/pdf', true],
      ['Application/PDF;x=1', 'application/pdf; version=1.7', true],
      ['image/png, application/pdf;q=0.2', 'application/pdf', true],
      ['text/*', 'text/plain', true],
      ['*/*', 'image/png', true],
      ['text/*;q=0, text/plain', 'text/plain', true],
      ['text/plain, */*;q=0', 'text/plain', true],
      ['image/png', 'application/pdf', false],
      ['text/plain;q=0', 'text/plain', false],
      ['text/*, text/plain;q=0', 'text/plain', false],
      ['*/*, text/*;q=0', 'text/csv', false],
      ['text/*', 'application/text', false],
    ];
    for (const [accept, type, accepted] of cases)
      expect(acceptsMediaType(accept, type), `${accept} ${type}`).toBe(accepted);
  });
});

describe('isJsonFormat', () => {
  it('takes the JSON spellings in any case, with parameters, and `+` decoded as a space', () => {
    for (const format of [
      'json',
      'JSON',
      'application/fhir+json',
      'application/fhir json',
      'application/json',
      'application/json+fhir',
      'application/fhir+json; fhirVersion=4.0',
    ])
      expect(isJsonFormat(format), format).toBe(true);
  });

  it('refuses XML spellings and unknown values', () => {
    for (const format of ['xml', 'text/xml', 'application/xml', 'Application/FHIR+XML', 'ttl', 'html', ''])
      expect(isJsonFormat(format), format).toBe(false);
  });
});

describe('checkFhirJsonWanted', () => {
  const status = (formats: string[], accept?: string): number | undefined => {
    try {
      checkFhirJsonWanted(formats, accept);
      return undefined;
    } catch (error) {
      expect(error).toBeInstanceOf(FhirError);
      expect((error as FhirError).issueCode).toBe('not-supported');
      return (error as FhirError).status;
    }
  };

  it('lets `_format` override Accept, both ways', () => {
    expect(status(['json'], 'application/fhir+xml')).toBeUndefined();
    expect(status(['xml'], 'application/fhir+json')).toBe(406);
  });

  it('refuses when any `_format` value is not JSON', () => {
    expect(status(['json', 'xml'])).toBe(406);
    expect(status(['unknown'])).toBe(406);
  });

  it('falls back to Accept without `_format`', () => {
    expect(status([], 'application/fhir+xml')).toBe(406);
    expect(status([], 'application/fhir+json')).toBeUndefined();
    expect(status([])).toBeUndefined();
  });
});
