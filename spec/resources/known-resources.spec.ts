/**
 * A resource-lock client remembers the resources it has seen exist (to lock them in one command,
 * without the creating upsert), but only the 1,000 it used last: with a new name per request,
 * memory stays bounded.
 */
import { expect } from 'chai';
import { resourceLocks } from '../../lib';
import { commandsSentBy, freshCollection } from '../support/fixture';

/** How many resource names a client remembers (docs/resource-locks.md, "First use of a resource"). */
const REMEMBERED = 1_000;

describe('the resources a client remembers', () => {
  it(`are the ${REMEMBERED} it used last: one used before ${REMEMBERED} others is created again (two commands), a recent one is locked in one`, async function () {
    this.timeout(60_000);
    const collection = await freshCollection();
    const locks = resourceLocks({ collection });
    const names = Array.from({ length: REMEMBERED + 1 }, (_, i) => `request-${i}`);
    await locks.xlock(names[0]!, 'job'); // used first: the oldest
    for (let i = 1; i < names.length; i += 50) {
      await Promise.all(names.slice(i, i + 50).map((name) => locks.xlock(name, 'job')));
    }
    await locks.unlock('job');

    const oldest = await commandsSentBy(() => locks.xlock(names[0]!, 'again'));
    expect(oldest.error, 'the oldest name is locked').to.equal(undefined);
    expect(oldest.commands, `the oldest name was forgotten: its document is ensured again (${REMEMBERED + 1} names used)`).to.deep.equal(['update', 'findAndModify']);
    const newest = await commandsSentBy(() => locks.xlock(names[REMEMBERED]!, 'again'));
    expect(newest.commands, 'the newest name is still remembered: one command').to.deep.equal(['findAndModify']);
  });
});
