/** Local time (ms since the epoch) on this machine, which is also the test server's clock; a test steps a lock's injected `clock`, never this one. */
export const realNow = (): number => performance.timeOrigin + performance.now();
