/**
 * Waiting in tests for something another process does. There is no deadline here on purpose: how
 * long it takes is the machine's business (a loaded CI host may be ten times slower); a wait that
 * never ends is caught by the test's own timeout, which is a safety net, not a measurement.
 */
export async function eventually(cond: () => boolean | Promise<boolean>, pollMs = 25): Promise<void> {
  while (!(await cond())) await new Promise((r) => setTimeout(r, pollMs));
}
