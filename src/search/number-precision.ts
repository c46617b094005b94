/** A decimal and the half-open range `[low, high)` its significant digits imply. */
export interface DecimalRange {
  value: number;
  low: number;
  high: number;
}

const DECIMAL = /^[+-]?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;

/** Rounds away binary noise (`100.45 - 0.05`) to 15 significant digits. */
function clean(n: number): number {
  return Number(n.toPrecision(15));
}

/**
 * Parses a FHIR search number (`100`, `100.00`, `1e2`) with its implicit range: `100` stands for
 * `[99.5, 100.5)`, `100.00` for `[99.995, 100.005)`, and `1e2`, as the R4 page's example has it,
 * for `[95, 105)` (exponent notation keeps one more digit than it writes). Undefined when the text
 * is not a decimal.
 * @see https://hl7.org/fhir/R4/search.html#number
 */
export function parseDecimalRange(text: string): DecimalRange | undefined {
  const m = DECIMAL.exec(text);
  if (!m) return undefined;
  const value = Number(text);
  if (!Number.isFinite(value)) return undefined;
  const decimals = m[2]?.length ?? 0;
  const exponent = m[3] === undefined ? 0 : Number(m[3]);
  const half = 0.5 * 10 ** (m[3] === undefined ? -decimals : exponent - decimals - 1);
  return { value, low: clean(value - half), high: clean(value + half) };
}
