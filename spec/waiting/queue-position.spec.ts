import { expect } from 'chai';
import { QueuePosition } from '../../lib/waiting/queue-position';
import { MAX_RETRY_DELAY, MIN_RETRY_DELAY } from '../../lib/waiting/wait-options';

describe('QueuePosition: a fair waiter paced by its place in the queue', () => {
  it('before the queue is seen, the default backoff stands; the first in line tries from the shortest delay up', () => {
    const position = new QueuePosition();
    expect(position.pace(77)).to.equal(77);
    position.saw(0, 1_000);
    expect(position.first).to.equal(true);
    expect(position.behind).to.equal(false);
    const first = position.pace(150);
    expect(first).to.be.within(MIN_RETRY_DELAY / 2, MIN_RETRY_DELAY);
  });

  it('behind others, it sleeps about half its expected wait, by how fast it saw the queue move, within the backoff bounds', () => {
    const position = new QueuePosition();
    position.saw(8, 0);
    expect(position.behind).to.equal(true);
    position.saw(6, 20); // two left in 20 ms: 10 ms a turn
    expect(position.pace(150)).to.equal(30); // 6 ahead × 10 ms / 2
    position.saw(6, 400); // nobody left for 380 ms: the turn in progress is a long one
    expect(position.pace(4)).to.equal(MAX_RETRY_DELAY);
    position.saw(1, 401);
    expect(position.pace(150)).to.be.at.least(MIN_RETRY_DELAY);
  });

  it('a ticket no longer seen forgets the place: the waiter attempts again', () => {
    const position = new QueuePosition();
    position.saw(3, 0);
    position.forget();
    expect(position.behind).to.equal(false);
    expect(position.pace(42)).to.equal(42);
  });
});
