import { PlatformError } from '../errors.js';

/**
 * Marks the end of an exhaustive `switch` over a union: the call only type-checks when every
 * member has its `case`, so adding a member (a mutation kind, say) fails to compile until each
 * switch handles it. Throws if reached anyway (a value from outside the type system).
 */
export function assertNever(value: never): never {
  throw new PlatformError('ERR_INTERNAL', `Unexpected value ${JSON.stringify(value)}`);
}
