/** How a request ends with its lock: `ended` resolves once `finish` is called. */
export function ending(): { readonly ended: Promise<void>; readonly finish: () => void } {
  let finish!: () => void;
  const ended = new Promise<void>((resolve) => (finish = resolve));
  return { ended, finish };
}

/** Resolves after `ms` without keeping the process alive. */
export function leaseEnd(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)).unref());
}
