/**
 * How far a change stream has read, from its resume token (mongod's tokens begin with the cluster
 * time of what the stream read up to), compared with what the client has seen.
 */
import { expect } from 'chai';
import { tokenTime } from '../../lib/waiting/stream-progress';

describe('the progress of a change stream (tokenTime)', () => {
  it("reads the cluster time at the head of mongod's resume token, and nothing from other tokens", () => {
    // A token as mongod 6.0 sends it: Timestamp(1666275705, 2) first.
    expect(tokenTime({ _data: '8263515979000000022B0429296E1404' })).to.equal((1666275705n << 32n) | 2n);
    expect(tokenTime({ _data: '82635159790000000A' })! > tokenTime({ _data: '8263515979000000022B' })!, 'a later increment reads as later').to.equal(true);
    // mongo-java-server's tokens, and anything else: unknown (a read answering is then the only progress known).
    expect(tokenTime({ _data: '6b0bbe1700000003' })).to.equal(undefined);
    expect(tokenTime(null)).to.equal(undefined);
    expect(tokenTime({ _data: 42 })).to.equal(undefined);
  });
});
