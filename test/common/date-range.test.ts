import { describe, expect, it } from 'vitest';
import { parseDateRange } from '../../src/common/date-range.js';

const ms = (iso: string) => Date.parse(iso);

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
