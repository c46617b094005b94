import { describe, expect, it } from 'vitest';
import { FhirError } from '../../src/http/http-error.js';
import { decodeCursor, encodeCursor, type CursorShape } from '../../src/fhir/search/search-cursor.js';

const shape = (over: Partial<CursorShape> = {}): CursorShape => ({
  sort: '-family,birthdate',
  lastUpdated: false,
  keys: 2,
  ...over,
});

function expect400(fn: () => unknown): void {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(FhirError);
    expect((error as FhirError).status).toBe(400);
    expect((error as FhirError).expression).toEqual(['_cursor']);
    return;
  }
  throw new Error('expected a 400');
}

describe('_cursor', () => {
  it('round-trips a position of an order and of a _lastUpdated sort', () => {
    const cursor = { direction: 'before' as const, position: { id: 'a-1', keys: ['smith', null] } };
    const text = encodeCursor(cursor, '-family,birthdate');
    expect(text).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(decodeCursor(text, shape())).toEqual(cursor);
    const lu = {
      direction: 'after' as const,
      position: { id: 'x', lastUpdated: '2024-01-01T00:00:00.000001Z' },
    };
    expect(decodeCursor(encodeCursor(lu, ''), { sort: '', lastUpdated: true, keys: undefined })).toEqual(lu);
  });

  it('refuses a cursor that is malformed or of another sort', () => {
    const text = encodeCursor(
      { direction: 'after', position: { id: 'a', keys: ['x', 1] } },
      '-family,birthdate',
    );
    expect400(() => decodeCursor(text, shape({ sort: 'family' })));
    expect400(() => decodeCursor(text, shape({ keys: 1 })));
    expect400(() => decodeCursor(text, shape({ lastUpdated: true })));
    expect400(() => decodeCursor('not json', shape()));
    expect400(() => decodeCursor(Buffer.from('[1]').toString('base64url'), shape()));
    expect400(() => decodeCursor('x'.repeat(5000), shape()));
    const badId = encodeCursor(
      { direction: 'after', position: { id: '../x', keys: ['x', 1] } },
      shape().sort,
    );
    expect400(() => decodeCursor(badId, shape()));
  });
});
