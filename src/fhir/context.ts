import type { DataAccess } from '../auth/access/data-access.js';
import type { OutcomeIssue } from '../http/outcome.js';
import type { Principal } from '../http/principal.js';
import type { SearchCostLimits } from '../search/cost-limits.js';
import type { FhirResource, StorageOperations } from '../storage/types.js';
import { scopedStorage } from './scoped-storage.js';
import type { Terminology, TerminologySource } from '../terminology/terminology-types.js';

/**
 * What every FHIR interaction runs with. Interactions are framework-free: the router (and the
 * batch/transaction processor) build a context per request.
 */
export interface FhirContext {
  /** The store, or a transaction view of it. */
  storage: StorageOperations;
  /** The principal's project: every read and write stays inside it. */
  projectId: string;
  principal: Principal;
  /**
   * What a SMART user principal reaches (src/auth/data-access.ts); absent for every other
   * principal. `storage` is then already limited to it (`scopedStorage`).
   */
  access?: DataAccess;
  /**
   * The terminology service (the router's `terminology`) and this project's view of its own
   * `CodeSystem` / `ValueSet` resources, read through `storage` (so the caller's scopes apply).
   * Absent in a context built by hand: `:in`, `:below`, … then answer 400 not supported.
   */
  terminology?: { service: Terminology; source: TerminologySource };
  /**
   * Resolves when `resource` may be stored in this project; throws a 400 `FhirError` otherwise.
   * Its warnings (binding findings) go to `validationWarnings` when there is one.
   */
  validate(resource: FhirResource): Promise<void>;
  /**
   * Where `validate` puts the warnings of the writes of this request: present only when the
   * answer will show them (`Prefer: return=OperationOutcome`), so that no one else computes them.
   */
  validationWarnings?: OutcomeIssue[];
  /**
   * Every issue of `resource` at full strictness, whatever the project (`$validate`): names,
   * structure and bindings. Absent in a context built by hand.
   */
  validationIssues?(resource: FhirResource): Promise<OutcomeIssue[]>;
  /**
   * Runs `fn` with a context whose reads and writes apply as one (a storage transaction), or with
   * this one when it is that already: a conditional interaction's search and its write, so that
   * concurrent requests cannot both find no match and both create.
   */
  atomically<T>(fn: (ctx: FhirContext) => Promise<T>): Promise<T>;
  /**
   * Runs a costly read (a search, `$everything`, a history listing) in a turn of the project (the
   * router's `searchAdmission`: 429 when none comes), with `ctx` (this context, or one derived from
   * it, such as a transaction's) given the `deadline` the turn ends by. Absent: run at once,
   * without a deadline (a context built by hand). Call it through `admitted`.
   */
  admit?<T>(ctx: FhirContext, work: (ctx: FhirContext) => Promise<T>): Promise<T>;
  /**
   * When the costly read under way must be answered by, epoch ms: every store query it makes is
   * given it (`ResourceQuery.deadline`). Set by `admit`.
   */
  deadline?: number;
  /**
   * Bounds on what a search may ask (400 `too-costly` beyond), how far an exact total counts, what
   * includes add to a page, and how many codes a terminology modifier (`:in`, `:below`) stands for.
   * @default SEARCH_COST_DEFAULTS, DEFAULT_MAX_ACCURATE_TOTAL, MAX_INCLUDED, MAX_INCLUDE_DEPTH, DEFAULT_MAX_TERMINOLOGY_CODES
   */
  searchLimits?: SearchCostLimits & {
    maxAccurateTotal?: number;
    maxIncluded?: number;
    maxIncludeDepth?: number;
    maxTerminologyCodes?: number;
  };
}

/** The context of `ctx` inside the transaction `tx`: nested `atomically` calls run in it as well. */
export function transactionContext(ctx: FhirContext, tx: StorageOperations): FhirContext {
  const storage = ctx.access ? scopedStorage(tx, ctx.access) : tx;
  const inner: FhirContext = { ...ctx, storage, atomically: (fn) => fn(inner) };
  return inner;
}
