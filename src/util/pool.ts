/**
 * Runs `work` over `items`, in order, with at most `concurrency` in flight. The first failure stops
 * new items from starting; the ones in flight settle, then that failure is thrown.
 */
export async function runPool<T>(items: readonly T[], concurrency: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failed = false;
  const lane = async (): Promise<void> => {
    while (!failed && next < items.length) {
      const item = items[next++] as T;
      try {
        await work(item);
      } catch (e) {
        failed = true;
        throw e;
      }
    }
  };
  const results = await Promise.allSettled(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, lane));
  const rejected = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (rejected !== undefined) throw rejected.reason;
}
