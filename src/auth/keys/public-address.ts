/**
 * Whether an address a client's `jwks_uri` leads to is on the public internet: fetching a URL a
 * project admin registered must not reach the server's own loopback, its private network or a
 * cloud metadata service (SSRF).
 */
import { lookup as dnsLookup } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';

// IPv4 ranges ipaddr.js 1.x names as `unicast` that are not public either.
const NOT_PUBLIC_V4: [ipaddr.IPv4, number][] = [
  ipaddr.IPv4.parseCIDR('198.18.0.0/15'), // benchmarking (RFC 2544)
];
// Global unicast IPv6 (RFC 4291 §2.4): everything else (IPv4-compatible, site-local, ULA,
// NAT64 local-use, …) is not an internet address.
const GLOBAL_V6 = ipaddr.IPv6.parseCIDR('2000::/3');

/**
 * Whether `address` (an IPv4 or IPv6 literal, without brackets) is a public unicast address. False
 * for loopback, unspecified (`0.0.0.0`, `::`), private (RFC 1918), shared (CGNAT 100.64/10), link
 * local (169.254/16, fe80::/10), unique local (fc00::/7), multicast, broadcast, reserved and
 * documentation ranges, and for every IPv6 form that carries an IPv4 address (IPv4-mapped
 * `::ffff:127.0.0.1`, IPv4-compatible, 6to4, Teredo, NAT64), whatever that address. False for a
 * non-address.
 */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  const ip = ipaddr.parse(address);
  if (ip.kind() === 'ipv4') {
    const v4 = ip as ipaddr.IPv4;
    return v4.range() === 'unicast' && !NOT_PUBLIC_V4.some((range) => v4.match(range));
  }
  const v6 = ip as ipaddr.IPv6;
  return v6.match(GLOBAL_V6) && v6.range() === 'unicast';
}

/**
 * Whether a URL's `hostname` may be a public host, judged without DNS: an IP literal must be
 * public, and `localhost` names (RFC 6761 §6.3) never are. Other names pass: what they resolve to
 * is checked when connecting ({@link publicOnlyLookup}).
 */
export function isPublicHostname(hostname: string): boolean {
  const host = hostname
    .replace(/^\[(.*)\]$/, '$1')
    .replace(/\.$/, '')
    .toLowerCase();
  if (isIP(host) !== 0) return isPublicAddress(host);
  return host !== 'localhost' && !host.endsWith('.localhost');
}

/**
 * The default of the options allowing `jwks_uri`s on private addresses: outside production
 * (`NODE_ENV` other than `production`) they are allowed, as `http:` on loopback is, for JWKS
 * servers run on a developer's machine or in tests.
 */
export function privateAddressesAllowedByDefault(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.NODE_ENV !== 'production';
}

/** What `publicOnlyLookup` fails with for a name that resolves to a non-public address. */
export class NonPublicAddressError extends Error {
  readonly code = 'ERR_NON_PUBLIC_ADDRESS';
  constructor(
    readonly hostname: string,
    readonly address: string,
  ) {
    super(`${hostname} resolves to ${address}, which is not a public address`);
    this.name = 'NonPublicAddressError';
  }
}

/**
 * A `lookup` for sockets (`net.connect`, an `http.Agent`) that resolves as `resolve` does
 * (`dns.lookup` by default) and fails with `NonPublicAddressError` when any address of the answer
 * is not public: the address is checked after resolution, at connect time, so a name that
 * resolved to a public address when it was registered and to 127.0.0.1 now (DNS rebinding) is
 * refused. Node skips the lookup for IP literals: check those with {@link isPublicHostname}.
 */
export function publicOnlyLookup(resolve: LookupFunction = dnsLookup): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname, options, (error, address, family) => {
      if (error) {
        callback(error, address);
        return;
      }
      const all = Array.isArray(address) ? address : [{ address, family: family ?? 0 }];
      const refused = all.find((entry) => !isPublicAddress(entry.address));
      if (refused) callback(new NonPublicAddressError(hostname, refused.address), address);
      else callback(null, address, family);
    });
  };
}
