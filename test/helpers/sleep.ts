/**
 * Waits `ms` of wall time. Only for what a test cannot wait for as an event: a while in which
 * something must NOT happen (a write that must stay blocked), a pace a test sets (a slow client),
 * or sampling during a load. A test that sleeps and then expects something to HAVE happened waits
 * for it instead (`eventually`, `clockPast` in ./eventually.ts).
 */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
