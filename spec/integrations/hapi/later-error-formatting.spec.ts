/**
 * An application that formats its errors in an `onPreResponse` extension registered after
 * monglock (as the docs advise) sees every answer monglock settles on, its error answers
 * included: a commit that could not be applied, a checkout whose lock was lost. hapi takes a boom
 * returned by an extension as a takeover that skips the later ones, so monglock must not answer
 * that way.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { commit, writeLock } from '../../../lib';
import { lockOf } from '../../../lib/hapi';
import { freshCollection } from '../../support/fixture';
import { makeServer, stopServers } from '../../support/hapi-server';

const byId = (request: Hapi.Request): Document => ({ _id: request.params.id });

/** What the application's error formatter saw of an error answer. */
interface Seen {
  readonly isBoom: boolean;
  readonly statusCode: number;
  readonly message: string;
}

describe("hapi: the application's onPreResponse sees monglock's error answers", () => {
  afterEach(stopServers);

  it('a commit that cannot be applied (the lock force-released meanwhile) and a checkout of a lost lock reach an onPreResponse registered after monglock as the booms they are', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'a', n: 0 }, { _id: 'b' }]);
    const lock = writeLock({ collection, locktimeout: 5_000 });
    const forceRelease = (request: Hapi.Request): Promise<unknown> => writeLock({ collection }).release(byId(request)); // v2's forced release, proof-less
    const seen: Record<string, Seen> = {};
    const server = await makeServer((s) => {
      s.route({
        method: 'POST',
        path: '/docs/{id}/commit',
        options: { plugins: { monglock: { lock, filter: byId } }, handler: async (request) => (await forceRelease(request), commit({ $inc: { n: 1 } }, { committed: true })) },
      });
      s.route({
        method: 'POST',
        path: '/docs/{id}/checkout',
        options: { plugins: { monglock: { lock, filter: byId, mode: 'checkout', locktimeout: 600 } }, handler: async (request) => (await forceRelease(request), await new Promise((resolve) => setTimeout(resolve, 1_000)), lockOf(request).lock) },
      });
      // The application's error formatting, after monglock.
      s.ext('onPreResponse', (request, h) => {
        const response = request.response as { isBoom?: boolean; output?: { statusCode: number }; message?: string };
        if (!response.isBoom) return h.continue;
        seen[request.path] = { isBoom: true, statusCode: response.output!.statusCode, message: response.message! };
        return h.response({ formatted: true, status: response.output!.statusCode }).code(response.output!.statusCode);
      });
    });
    await server.start();
    const answers: Record<string, { status: number; body: unknown }> = {};
    for (const path of ['/docs/a/commit', '/docs/b/checkout']) {
      const response = await fetch(`http://127.0.0.1:${server.info.port}${path}`, { method: 'POST' });
      answers[path] = { status: response.status, body: await response.json() };
    }
    expect({ answers, seen }, "monglock's error answers, formatted by the application").to.deep.equal({
      answers: {
        '/docs/a/commit': { status: 409, body: { formatted: true, status: 409 } },
        '/docs/b/checkout': { status: 409, body: { formatted: true, status: 409 } },
      },
      seen: {
        '/docs/a/commit': { isBoom: true, statusCode: 409, message: 'LockNotFound' },
        '/docs/b/checkout': { isBoom: true, statusCode: 409, message: 'LockNotFound' },
      },
    });
    expect((await collection.findOne({ _id: 'a' as never }))?.n, 'the commit was not applied').to.equal(0);
  });
});
