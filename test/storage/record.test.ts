import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  encodeRecord,
  encodeRecordInto,
  HEADER_LENGTH,
  isValidRecord,
  readLastUpdated,
  readSeq,
  readSuperseded,
  recordCrc,
  recordLength,
} from '../../src/storage/file/record.js';

const hex = (value: number, width: number) => value.toString(16).padStart(width, '0');

describe('encodeRecord', () => {
  it('writes the documented header, the JSON as UTF-8 and a CRC that checks, for any input', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 48 - 1 }),
        fc.integer({ min: 0, max: 2 ** 52 - 1 }),
        fc.constantFrom('C' as const, 'U' as const, 'D' as const),
        fc.oneof(
          fc.json(),
          fc.string({ unit: 'binary' }).map((s) => JSON.stringify({ s })),
        ),
        (seq, micros, op, json) => {
          const buf = encodeRecord(seq, micros, op, json);
          const crc = recordCrc(buf, 0, buf.length);
          const header = `${hex(crc, 8)} ${hex(seq, 12)} ${'0'.repeat(12)} ${hex(micros, 13)} ${op} `;
          expect(buf.toString('latin1', 0, HEADER_LENGTH)).toBe(header);
          expect(buf.toString('utf8', HEADER_LENGTH, buf.length - 1)).toBe(json);
          expect(buf[buf.length - 1]).toBe(0x0a);
          expect(isValidRecord(buf, 0, buf.length)).toBe(true);
          expect([readSeq(buf, 0), readLastUpdated(buf, 0), readSuperseded(buf, 0)]).toEqual([
            seq,
            micros,
            0,
          ]);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('encodes records back to back into one buffer exactly as one at a time', () => {
    const record = fc.record({
      micros: fc.integer({ min: 0, max: 2 ** 52 - 1 }),
      op: fc.constantFrom('C' as const, 'U' as const, 'D' as const),
      json: fc.oneof(
        fc.json(),
        fc.string({ unit: 'binary' }).map((s) => JSON.stringify({ s })),
      ),
    });
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 48 - 1 }),
        fc.array(record, { maxLength: 8 }),
        (seq, records) => {
          const lengths = records.map((r) => Buffer.byteLength(r.json));
          const buf = Buffer.alloc(lengths.reduce((sum, n) => sum + recordLength(n), 0));
          let at = 0;
          for (const [i, r] of records.entries()) {
            encodeRecordInto(buf, at, seq, r.micros, r.op, r.json, lengths[i]!);
            at += recordLength(lengths[i]!);
          }
          const one = Buffer.concat(records.map((r) => encodeRecord(seq, r.micros, r.op, r.json)));
          expect(buf.equals(one)).toBe(true);
          // Each record checks at its own offset.
          let start = 0;
          for (const n of lengths) {
            expect(isValidRecord(buf, start, start + recordLength(n))).toBe(true);
            start += recordLength(n);
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
