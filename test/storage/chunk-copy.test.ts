// The parser of the binary COPY output a download of PostgreSQL export files reads its chunks from.
import { describe, expect, it } from 'vitest';
import { parseChunkCopy } from '../../src/storage/postgres/chunk-copy.js';

/** COPY's binary format of rows (off int8, len int4, data bytea), as PostgreSQL writes it. */
function copyOutput(rows: { off: number; len: number; data: Buffer }[], extension = Buffer.alloc(0)): Buffer {
  const parts: Buffer[] = [Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1')];
  const header = Buffer.alloc(8);
  header.writeUInt32BE(extension.length, 4);
  parts.push(header, extension);
  for (const row of rows) {
    const fields = Buffer.alloc(2 + 4 + 8 + 4 + 4 + 4);
    fields.writeInt16BE(3, 0);
    fields.writeInt32BE(8, 2);
    fields.writeBigInt64BE(BigInt(row.off), 6);
    fields.writeInt32BE(4, 14);
    fields.writeInt32BE(row.len, 18);
    fields.writeInt32BE(row.data.length, 22);
    parts.push(fields, row.data);
  }
  parts.push(Buffer.from([0xff, 0xff]));
  return Buffer.concat(parts);
}

describe('parseChunkCopy', () => {
  it('reads every row, its bytes exactly as stored (any byte value, none decoded)', () => {
    const rows = [
      { off: 0, len: 5, data: Buffer.from([0, 0xff, 0x80, 0xc3, 0x28]) },
      { off: 5, len: 2_000_000_000, data: Buffer.alloc(0) },
      { off: 2 ** 40, len: 1, data: Buffer.from('\n') },
    ];
    const parsed = parseChunkCopy(copyOutput(rows, Buffer.from('ext')));
    expect(parsed.map((r) => ({ ...r, data: [...r.data] }))).toEqual(
      rows.map((r) => ({ ...r, data: [...r.data] })),
    );
    expect(parseChunkCopy(copyOutput([]))).toEqual([]);
  });

  it('refuses an output cut short, without its signature, or of other columns', () => {
    const good = copyOutput([{ off: 0, len: 4, data: Buffer.from('abcd') }]);
    for (const bad of [
      good.subarray(0, good.length - 2),
      good.subarray(0, good.length - 5),
      Buffer.concat([Buffer.from('PGCOPX'), good.subarray(6)]),
      Buffer.alloc(3),
    ]) {
      expect(() => parseChunkCopy(bad)).toThrow(expect.objectContaining({ code: 'ERR_EXPORT_STOPPED' }));
    }
    const twoFields = Buffer.from(good);
    twoFields.writeInt16BE(2, 19);
    expect(() => parseChunkCopy(twoFields)).toThrow(expect.objectContaining({ code: 'ERR_EXPORT_STOPPED' }));
  });
});
