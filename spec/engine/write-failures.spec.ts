/**
 * What a failed write tells: only a failure after which the server may have applied the write (or
 * may still apply it) is `unknown`, the only class that says "may have been written" and hands
 * the caller the lock (`err.lock`). Errors are the driver's own classes.
 */
import { expect } from 'chai';
import {
  BSON,
  MongoClientClosedError,
  MongoInvalidArgumentError,
  MongoNetworkError,
  MongoNotConnectedError,
  MongoServerError,
  MongoTopologyClosedError,
} from 'mongodb';
import { classifyWriteFailure, locateFailure } from '../../lib/engine/write-failures';

const serverError = (code: number, more: Record<string, unknown> = {}): MongoServerError => new MongoServerError({ ok: 0, code, errmsg: `code ${code}`, ...more });

describe('classifying a failed write', () => {
  it('a command the server refused (a duplicate key, a bad update) wrote nothing', () => {
    expect(classifyWriteFailure(serverError(11000))).to.equal('refused');
    expect(classifyWriteFailure(serverError(2))).to.equal('refused');
    expect(classifyWriteFailure(serverError(14))).to.equal('refused'); // TypeMismatch: $inc of a string
    expect(classifyWriteFailure(serverError(121))).to.equal('refused'); // DocumentValidationFailure
  });

  it('an error that does not prove the command wrote nothing (a retry refused by a rate limit or authorization, a code this library does not know) is unknown', () => {
    expect(classifyWriteFailure(serverError(462))).to.equal('unknown'); // IngressRequestRateLimitExceeded
    expect(classifyWriteFailure(serverError(13))).to.equal('unknown'); // Unauthorized
    expect(classifyWriteFailure(serverError(61))).to.equal('unknown'); // ShardKeyNotFound: mongos versions may differ between an attempt and its retry
    expect(classifyWriteFailure(serverError(999_999))).to.equal('unknown');
    expect(classifyWriteFailure(new MongoServerError({ ok: 0, errmsg: 'no code' }))).to.equal('unknown');
  });

  it("a retry's answer that cannot tell whether the first attempt ran (217 IncompleteTransactionHistory, 225 TransactionTooOld) is unknown", () => {
    expect(classifyWriteFailure(serverError(217))).to.equal('unknown');
    expect(classifyWriteFailure(serverError(225))).to.equal('unknown');
  });

  it('time limits, write concern errors and retryable errors are unknown', () => {
    expect(classifyWriteFailure(serverError(50))).to.equal('unknown'); // MaxTimeMSExpired
    expect(classifyWriteFailure(serverError(64))).to.equal('unknown'); // WriteConcernFailed
    expect(classifyWriteFailure(serverError(11000, { writeConcernError: { code: 64, errmsg: 'waiting for replication timed out' } }))).to.equal('unknown');
    expect(classifyWriteFailure(serverError(11602, { errorLabels: ['RetryableWriteError'] }))).to.equal('unknown');
  });

  it('a network error, or a client closed while the command or its retry was in flight, is unknown', () => {
    expect(classifyWriteFailure(new MongoNetworkError('connection reset'))).to.equal('unknown');
    expect(classifyWriteFailure(new MongoClientClosedError())).to.equal('unknown');
    expect(classifyWriteFailure(new MongoTopologyClosedError())).to.equal('unknown');
  });

  it('a client closed before the call, or an argument the driver refused, sent nothing', () => {
    expect(classifyWriteFailure(new MongoNotConnectedError('not connected'))).to.equal('closed');
    expect(classifyWriteFailure(new MongoInvalidArgumentError('bad'))).to.equal('not-sent');
  });

  it('a BSONError (TypeError, RangeError) sent nothing only when its command does not serialize: otherwise it was thrown decoding the reply of a command that may have run', () => {
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(classifyWriteFailure(locateFailure(new BSON.BSONError('Cannot convert circular structure to BSON'), [{ _id: 1 }, { $set: circular }]))).to.equal('not-sent');
    expect(classifyWriteFailure(locateFailure(new BSON.BSONError('Invalid UTF-8 string in BSON document'), [{ _id: 1 }, { $set: { a: 1 } }]))).to.equal('unknown');
    expect(classifyWriteFailure(locateFailure(new RangeError('out of range'), undefined)), 'a command not known').to.equal('unknown');
  });
});
