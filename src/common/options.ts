import bytes from 'bytes';
import { InvalidOptionError } from '../errors.js';
/**
 * Checks of the options a factory (`fhirRouter`, `bulkExportRouter`, …) resolves once when it is
 * created: each returns the value (or its default) or fails through {@link optionError}, with a
 * message naming the factory and the option (`scimRouter: maxResults must be a positive integer`).
 */

/**
 * Fails a factory on a bad option: every option check ends here, so that the error they throw is
 * chosen in one place. Throws an `InvalidOptionError` (`ERR_INVALID_OPTION`) whose message is
 * `${owner}: ${message}` and whose `option` names the option.
 * @param owner the factory, which prefixes the message (`bulkExportRouter`)
 * @param option the option at fault (`retention`, `rateLimit.windowSeconds`)
 * @param message what is wrong, naming the option (`retention must be a positive number`)
 */
export function optionError(owner: string, option: string, message: string): never {
  throw new InvalidOptionError(`${owner}: ${message}`, option);
}

/**
 * A required function option.
 * @param problem the message's ending
 * @default problem 'is required'
 */
export function requireFunction<F>(
  owner: string,
  name: string,
  value: F | undefined,
  problem = 'is required',
): F {
  if (typeof value !== 'function') optionError(owner, name, `${name} ${problem}`);
  return value;
}

/** An optional function option: `fallback` when absent. */
export function optionalFunction<F>(owner: string, name: string, value: F | undefined, fallback: F): F {
  if (value === undefined) return fallback;
  if (typeof value !== 'function') optionError(owner, name, `${name} must be a function`);
  return value;
}

/**
 * A positive integer (at most `max`), or `fallback` when `value` is undefined.
 * @default max Infinity
 */
export function positiveInteger(
  owner: string,
  name: string,
  value: number | undefined,
  fallback: number,
  max = Infinity,
): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1 || value > max)
    optionError(owner, name, `${name} must be a positive integer`);
  return value;
}

/**
 * A finite number > 0, or `fallback` when `value` is undefined (without `fallback`, `value` is
 * required).
 */
export function positiveNumber(
  owner: string,
  name: string,
  value: number | undefined,
  fallback?: number,
): number {
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0)
    optionError(owner, name, `${name} must be a positive number`);
  return value;
}

/** A size or count limit: a number > 0, `Infinity` for none, or `fallback` when `value` is undefined. */
export function positiveLimit(
  owner: string,
  name: string,
  value: number | undefined,
  fallback: number,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || Number.isNaN(value) || value <= 0)
    optionError(owner, name, `${name} must be a positive number or Infinity`);
  return value;
}

/** A finite number >= 0, or `fallback` when `value` is undefined. */
export function nonNegativeNumber(
  owner: string,
  name: string,
  value: number | undefined,
  fallback: number,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
    optionError(owner, name, `${name} must be a finite number >= 0`);
  return value;
}

/** A boolean, or `fallback` when `value` is undefined. */
export function booleanOption(
  owner: string,
  name: string,
  value: boolean | undefined,
  fallback: boolean,
): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') optionError(owner, name, `${name} must be a boolean`);
  return value;
}

/** One of `allowed`, or undefined when `value` is. */
export function oneOf<T extends string>(
  owner: string,
  name: string,
  value: T | undefined,
  allowed: readonly T[],
): T | undefined {
  if (value !== undefined && !allowed.includes(value))
    optionError(owner, name, `${name} must be one of ${allowed.join(', ')}`);
  return value;
}

/** A size (bytes, or a string such as `'16mb'`) in bytes: `NaN` for a string `bytes` cannot read. */
export function sizeInBytes(value: number | string): number {
  return typeof value === 'number' ? value : (bytes.parse(value) ?? Number.NaN);
}

/**
 * A size option: a positive number of bytes or a size string (`'16mb'`), or `fallback` when `value`
 * is undefined; answered as given (body-parser reads both).
 */
export function sizeOption(
  owner: string,
  name: string,
  value: number | string | undefined,
  fallback: number | string,
): number | string {
  if (value === undefined) return fallback;
  const size = typeof value === 'number' || typeof value === 'string' ? sizeInBytes(value) : Number.NaN;
  if (!Number.isFinite(size) || size <= 0) {
    optionError(owner, name, `${name} must be a positive number of bytes or a size string such as '1mb'`);
  }
  return value;
}
