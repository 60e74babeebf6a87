import type { CommitRequest } from '../../lib/locks/commit';

/** The commit class of a second copy of lib/locks/commit, as two copies of monglock in node_modules have it. */
export function secondCopyOfCommit(): typeof CommitRequest {
  const path = require.resolve('../../lib/locks/commit');
  const first = require.cache[path];
  delete require.cache[path];
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    return (require(path) as { CommitRequest: typeof CommitRequest }).CommitRequest;
  } finally {
    require.cache[path] = first;
  }
}
