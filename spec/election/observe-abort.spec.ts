import { expect } from 'chai';
import { election } from '../../lib';
import { changeFeedOf } from '../../lib/waiting/change-feed';
import { freshCollection, sleep } from '../support/fixture';

/** Issue 41 §1: observe "ends when the signal aborts or the loop breaks, leaving no cursor or timer". */
describe('observe: its signal aborts while the consumer is not pulling', () => {
  it('the change stream it asked for is let go once the signal aborts, without another pull', async function () {
    this.timeout(20_000);
    const collection = await freshCollection();
    const elections = election({ collection, lease: 2_000 });
    const feed = changeFeedOf(collection, 'lock');
    expect(feed.state, 'nothing watches before').to.equal('idle');
    const controller = new AbortController();
    const iterator = elections.observe({ _id: 'x' }, { signal: controller.signal })[Symbol.asyncIterator]();
    expect((await iterator.next()).value).to.equal(undefined); // the current state: nobody leads
    expect(feed.state, 'observing').to.not.equal('idle');
    // The consumer stops: it aborts the signal, and pulls no more (its loop body is busy elsewhere, or it took one state).
    controller.abort();
    await sleep(2_500); // past the stream's linger after its last listener
    expect(feed.state, 'the observation left its stream').to.equal('idle');
    // A later pull ends the iteration.
    expect((await iterator.next()).done).to.equal(true);
  });
});
