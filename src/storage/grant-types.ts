/*
 * What the SMART App Launch authorization server keeps between requests (see `GrantStore`).
 */

/**
 * The kinds of grant records:
 * - `ticket`: a pending authorization (the browser between the authorize request and the consent);
 * - `code`: an authorization code (single use, about a minute);
 * - `refresh`: a refresh token (rotated: using one marks it used; a used one kept until it expires,
 *   so that its reuse is recognised);
 * - `family`: one authorization as a whole (a user's consent: its code, and every access token and
 *   refresh token issued from it, which name it), keyed by its family id and kept until the last of
 *   them expires. Its tokens count only while it exists: revoking it ends them all at once;
 * - `revoked-token`: the `jti` of a revoked access token, until the token's own expiry.
 */
export type GrantKind = 'ticket' | 'code' | 'refresh' | 'family' | 'revoked-token';

/** One grant record. Plain JSON. */
export interface GrantRecord {
  kind: GrantKind;
  /**
   * Its key within its kind: a hash of the secret value for codes and refresh tokens (the value
   * itself is never stored), the ticket id, the access token's `jti`.
   */
  key: string;
  projectId: string;
  clientId: string;
  /** The signed-in user (SCIM user id) it was issued to, when known. */
  userId?: string;
  /**
   * The authorization it belongs to: the id of the `family` record of one consent, shared by its
   * code and every refresh token rotated from it.
   */
  family?: string;
  /** Epoch ms; an expired record is never returned and may be dropped at any time. */
  expiresAt: number;
  /** Set by `GrantStore.use`. */
  used?: boolean;
  /** Whatever the authorization server keeps with it (plain JSON). */
  data: Record<string, unknown>;
}

/** Which grants `GrantStore.revoke` removes: those of a project matching every field given. */
export interface GrantFilter {
  projectId: string;
  userId?: string;
  clientId?: string;
  family?: string;
}

/**
 * Grant records of the SMART App Launch authorization server (authorize endpoint, token endpoint,
 * revocation), kept by the store so that every instance sharing it agrees. The single-use and
 * rotation steps (`take`, `use`) are atomic: of two calls racing on one key (two instances on one
 * PostgreSQL database included) exactly one gets the record, or sees it unused. `extend` and
 * `revoke` are atomic against each other: once a `revoke` has resolved, every `extend` of a record
 * it removed fails, however the two calls raced (the token endpoint issues tokens only after
 * extending their `family`, so tokens issued while their family was being revoked are dead too).
 */
export interface GrantStore {
  /** Inserts or replaces the record of `kind` and `key`. */
  put(grant: GrantRecord): Promise<void>;
  /** The unexpired record, or undefined. */
  get(kind: GrantKind, key: string): Promise<GrantRecord | undefined>;
  /** Removes the unexpired record and returns it; undefined when none (or another call took it). */
  take(kind: GrantKind, key: string): Promise<GrantRecord | undefined>;
  /**
   * Marks the unexpired record used and returns it, with `firstUse` true only for the call that
   * marked it; undefined when there is none.
   */
  use(kind: GrantKind, key: string): Promise<{ grant: GrantRecord; firstUse: boolean } | undefined>;
  /**
   * Pushes the unexpired record's `expiresAt` to `expiresAt` when that is later (never earlier), in
   * one atomic step; resolves false when there is no such record (never put, expired or revoked).
   */
  extend(kind: GrantKind, key: string, expiresAt: number): Promise<boolean>;
  /**
   * Removes the tickets, codes, refresh tokens and families matching `filter` (never `revoked-token`
   * records) in one atomic step; resolves how many were removed.
   */
  revoke(filter: GrantFilter): Promise<number>;
}
