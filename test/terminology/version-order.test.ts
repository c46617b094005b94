import { describe, expect, it } from 'vitest';
import { LruCache } from '../../src/terminology/lru-cache.js';
import { compareVersions, splitCanonical } from '../../src/terminology/version-order.js';

describe('compareVersions', () => {
  it('orders numeric parts as numbers, others as text, an absent version first', () => {
    const sorted = ['1.10', '1.9', '2', '1.9.1', '2019-12', '2020-01'].sort(compareVersions);
    expect(sorted).toEqual(['1.9', '1.9.1', '1.10', '2', '2019-12', '2020-01']);
    expect(compareVersions(undefined, '0')).toBeLessThan(0);
    expect(compareVersions('0', undefined)).toBeGreaterThan(0);
    expect(compareVersions('1.0', '1.0')).toBe(0);
  });
});

describe('splitCanonical', () => {
  it('splits url|version', () => {
    expect(splitCanonical('http://x/vs|4.0.1')).toEqual({ url: 'http://x/vs', version: '4.0.1' });
    expect(splitCanonical('http://x/vs')).toEqual({ url: 'http://x/vs' });
    expect(splitCanonical('http://x/vs|')).toEqual({ url: 'http://x/vs' });
  });
});

describe('LruCache', () => {
  it('forgets the least recently used entry past its capacity', () => {
    const cache = new LruCache<string, number>(2);
    cache.set('a', 1);
    cache.set('b', 2);
    expect(cache.get('a')).toBe(1);
    cache.set('c', 3);
    expect(cache.get('b')).toBeUndefined();
    expect([cache.get('a'), cache.get('c'), cache.size]).toEqual([1, 3, 2]);
  });
});
