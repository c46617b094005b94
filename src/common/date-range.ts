/** A half-open range of instants `[start, end)` in epoch milliseconds. */
export interface InstantInterval {
  start: number;
  end: number;
}

const DATE_TIME =
  /^(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:\d{2})?)?)?)?$/;

/**
 * The range of instants a FHIR `date` / `dateTime` / `instant` search value stands for: a partial
 * date covers its whole year, month or day; a time without seconds its whole minute; seconds their
 * whole second, fractions their last digit. Without a time zone, UTC is assumed. Undefined when the
 * text is not a valid date.
 * @see https://hl7.org/fhir/R4/search.html#date
 */
export function parseDateRange(text: string): InstantInterval | undefined {
  const m = DATE_TIME.exec(text);
  if (!m) return undefined;
  const [, y, mo, d, h, mi, s, frac, zone] = m;
  const year = Number(y);
  const month = mo === undefined ? 1 : Number(mo);
  const day = d === undefined ? 1 : Number(d);
  const hour = h === undefined ? 0 : Number(h);
  const minute = mi === undefined ? 0 : Number(mi);
  const second = s === undefined ? 0 : Number(s);
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59) return undefined;
  // Date.UTC maps years 0-99 to 1900s; set the full year explicitly.
  const base = new Date(Date.UTC(2000, month - 1, day, hour, minute, second));
  base.setUTCFullYear(year);
  if (base.getUTCDate() !== day || base.getUTCMonth() !== month - 1) return undefined; // e.g. 02-30
  let offsetMinutes = 0;
  if (zone && zone !== 'Z') {
    const zh = Number(zone.slice(1, 3));
    const zm = Number(zone.slice(4, 6));
    if (zh > 14 || zm > 59) return undefined;
    offsetMinutes = (zone.startsWith('-') ? -1 : 1) * (zh * 60 + zm);
  }
  let start = base.getTime() - offsetMinutes * 60_000;
  let end: number;
  if (frac !== undefined) {
    const digits = Math.min(frac.length, 3);
    const step = 10 ** (3 - digits);
    start += Number(frac.slice(0, digits)) * step;
    end = start + step;
  } else if (s !== undefined) {
    end = start + 1000;
  } else if (mi !== undefined) {
    end = start + 60_000;
  } else {
    const next = new Date(base.getTime());
    if (d !== undefined) next.setUTCDate(next.getUTCDate() + 1);
    else if (mo !== undefined) next.setUTCMonth(next.getUTCMonth() + 1);
    else next.setUTCFullYear(next.getUTCFullYear() + 1);
    end = next.getTime() - offsetMinutes * 60_000;
  }
  return { start, end };
}
