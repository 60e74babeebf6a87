/** `ok`, the error's subtype or name, or `unsettled` when `promise` did not settle within `ms`. */
export async function settleWithin(promise: Promise<unknown>, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve('unsettled'), ms);
  });
  const outcome = promise.then(
    () => 'ok',
    (error: unknown) => String((error as { subtype?: unknown; name?: unknown })?.subtype ?? (error as { name?: unknown })?.name ?? 'error'),
  );
  try {
    return await Promise.race([outcome, bound]);
  } finally {
    clearTimeout(timer);
  }
}
