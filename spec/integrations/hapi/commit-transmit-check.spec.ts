/**
 * A handler's commit is applied only for an answer hapi can send: hapi has no hook after it
 * writes the status line, so whatever its transmit can still fail on (a header name or value, a
 * cookie set or unset, the payload's serialization) is checked before the commit is applied. An
 * answer that would fail is a 500 with nothing written, never a 500 for an update that was applied
 * (which a retrying client would apply twice).
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commit, writeLock } from '../../../lib';
import { freshCollection } from '../../support/fixture';
import { debitRoute, heldIds, makeServer, stopServers } from '../../support/hapi-server';

/** A handler's answer to a debit: `commit(update, value)` wrapped in a response that hapi cannot send. */
type Unsendable = (h: Hapi.ResponseToolkit, debited: ReturnType<typeof commit>) => Hapi.ResponseObject;

const cases: Record<string, Unsendable> = {
  'a header value outside latin-1': (h, debited) => h.response(debited).header('content-disposition', 'attachment; filename="re\u00e7u-\u20ac.txt"'),
  'a header name that is no HTTP token': (h, debited) => h.response(debited).header('x-bad name', 'x'),
  'a cookie value the server cannot format': (h, debited) => h.response(debited).state('session', 'a b;c'),
  'a cookie unset whose name the server cannot format': (h, debited) => h.response(debited).unstate('bad name'),
  "a payload whose response formatting cannot apply (spaces on a string)": (h) => h.response(commit({ $inc: { balance: -30 } }, 'debited 30')).spaces(2),
  'a payload whose response replacer throws': (h, debited) =>
    h.response(debited).replacer(() => {
      throw new Error('not serializable');
    }),
};

describe('hapi: a commit is applied only for an answer hapi can send', () => {
  afterEach(stopServers);

  for (const [name, unsendable] of Object.entries(cases)) {
    it(`${name}: 500, nothing written, the lock released`, async function () {
      this.timeout(20_000);
      const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
      const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
      const server = await makeServer((s) => s.route(debitRoute(lock, { handler: (_request, h) => unsendable(h, commit({ $inc: { balance: -30 } }, { debited: 30 })) })));
      await server.start();
      const response = await fetch(`http://127.0.0.1:${server.info.port}/accounts/a/debit`, { method: 'POST' });
      await response.arrayBuffer();
      const balance = (await accounts.findOne({ _id: 'a' as never }))?.balance as number;
      expect({ status: response.status, balance, held: await heldIds(accounts, 'a') }, 'the answer, the balance and the lock entries left').to.deep.equal({ status: 500, balance: 100, held: [] });
    });
  }

  it('an answer hapi can send, with its headers, cookies and formatting: the commit is applied and answered', async function () {
    this.timeout(20_000);
    const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
    const lock = writeLock({ collection: accounts, locktimeout: 5_000 });
    const handler: Hapi.Lifecycle.Method = (_request, h) =>
      h.response(commit({ $inc: { balance: -30 } }, { debited: 30 })).header('content-disposition', 'attachment; filename="re\u00e7u.txt"').state('session', 'abc').unstate('old').spaces(2).code(201);
    const server = await makeServer((s) => s.route(debitRoute(lock, { handler })));
    await server.start();
    const response = await fetch(`http://127.0.0.1:${server.info.port}/accounts/a/debit`, { method: 'POST' });
    const answer = { status: response.status, body: JSON.parse(await response.text()) as unknown, cookies: response.headers.getSetCookie().map((cookie) => cookie.split(';')[0]) };
    const balance = (await accounts.findOne({ _id: 'a' as never }))?.balance as number;
    expect({ answer, balance }, 'the answer and the balance').to.deep.equal({ answer: { status: 201, body: { debited: 30 }, cookies: ['session=abc', 'old='] }, balance: 70 });
  });
});
