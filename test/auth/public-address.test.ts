import type { LookupAddress } from 'node:dns';
import type { LookupFunction } from 'node:net';
import { describe, expect, it } from 'vitest';
import {
  isPublicAddress,
  isPublicHostname,
  privateAddressesAllowedByDefault,
  publicOnlyLookup,
} from '../../src/auth/keys/public-address.js';

describe('isPublicAddress', () => {
  it.each([
    ['8.8.8.8', true],
    ['93.184.216.34', true],
    ['2606:4700:4700::1111', true],
    ['127.0.0.1', false],
    ['127.8.9.10', false],
    ['0.0.0.0', false],
    ['10.1.2.3', false],
    ['172.16.0.1', false],
    ['172.31.255.254', false],
    ['192.168.1.1', false],
    ['169.254.169.254', false],
    ['100.64.0.1', false],
    ['198.18.0.1', false],
    ['192.0.2.1', false],
    ['224.0.0.1', false],
    ['255.255.255.255', false],
    ['240.0.0.1', false],
    ['::1', false],
    ['::', false],
    ['fe80::1', false],
    ['fc00::1', false],
    ['fd12:3456::1', false],
    ['fec0::1', false],
    ['ff02::1', false],
    ['::ffff:127.0.0.1', false],
    ['::ffff:8.8.8.8', false],
    ['::7f00:1', false],
    ['64:ff9b::7f00:1', false],
    ['2002:7f00:1::1', false],
    ['2001::1', false],
    ['2001:db8::1', false],
    ['not an address', false],
  ])('%s -> %s', (address, expected) => {
    expect(isPublicAddress(address)).toBe(expected);
  });
});

describe('isPublicHostname', () => {
  it.each([
    // The hostnames of the probe's URLs, as `new URL()` normalises them.
    ['http://127.0.0.1:5432/', false],
    ['http://[::1]:6379/', false],
    ['http://2130706433:5432/', false],
    ['https://169.254.169.254/latest/meta-data/', false],
    ['https://0x7f.1/', false],
    ['https://0/', false],
    ['https://[::ffff:127.0.0.1]/', false],
    ['https://[fd00::1]/', false],
    ['https://10.0.0.5/', false],
    ['https://localhost/', false],
    ['https://LOCALHOST./', false],
    ['https://keys.localhost/', false],
    ['https://8.8.8.8/', true],
    ['https://[2606:4700:4700::1111]/', true],
    ['https://keys.example.org/jwks.json', true],
  ])('%s -> %s', (uri, expected) => {
    expect(isPublicHostname(new URL(uri).hostname)).toBe(expected);
  });
});

/** A resolver answering `addresses` for every name, as `dns.lookup` does with and without `all`. */
function resolver(...addresses: string[]): LookupFunction {
  return (_hostname, options, callback) => {
    const all: LookupAddress[] = addresses.map((address) => ({
      address,
      family: address.includes(':') ? 6 : 4,
    }));
    if (options.all) callback(null, all);
    else callback(null, all[0]!.address, all[0]!.family);
  };
}

function lookupWith(
  lookup: LookupFunction,
  all: boolean,
): Promise<{ error: NodeJS.ErrnoException | null; address: string | LookupAddress[] }> {
  return new Promise((resolve) => {
    lookup('keys.example.org', { all }, (error, address) => resolve({ error, address }));
  });
}

describe('publicOnlyLookup', () => {
  it('passes public answers through and refuses any non-public one, with and without all', async () => {
    for (const all of [false, true]) {
      const ok = await lookupWith(publicOnlyLookup(resolver('93.184.216.34', '2606:2800:220:1::1')), all);
      expect(ok.error).toBeNull();
      for (const answer of [['127.0.0.1'], ['10.0.0.1'], ['::1'], ['169.254.169.254']]) {
        const refused = await lookupWith(publicOnlyLookup(resolver(...answer)), all);
        expect(refused.error).toMatchObject({ code: 'ERR_NON_PUBLIC_ADDRESS', address: answer[0] });
      }
    }
    // One private address among public ones is enough to refuse (rebinding answers mix them).
    const mixed = await lookupWith(publicOnlyLookup(resolver('93.184.216.34', '127.0.0.1')), true);
    expect(mixed.error).toMatchObject({ code: 'ERR_NON_PUBLIC_ADDRESS', address: '127.0.0.1' });
  });

  it('refuses localhost through the system resolver', async () => {
    const result = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
      publicOnlyLookup()('localhost', { all: true }, (error) => resolve(error));
    });
    expect(result).toMatchObject({ code: 'ERR_NON_PUBLIC_ADDRESS' });
  });
});

describe('privateAddressesAllowedByDefault', () => {
  it('is false under NODE_ENV=production only', () => {
    expect(privateAddressesAllowedByDefault({ NODE_ENV: 'production' })).toBe(false);
    expect(privateAddressesAllowedByDefault({ NODE_ENV: 'test' })).toBe(true);
    expect(privateAddressesAllowedByDefault({})).toBe(true);
  });
});
