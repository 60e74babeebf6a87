/**
 * Two conversions that wait for each other through a tag with a limit (its permits) are refused at once (found by an independent review; each test failed before its fix).
 */
import { expect } from 'chai';
import { multiLock } from '../../lib';
import { freshCollection, sleep } from '../support/fixture';

const settle = (promise: Promise<unknown>): Promise<string> =>
  promise.then(
    () => 'converted',
    (error: Error & { subtype?: string }) => String(error.subtype ?? error.message),
  );

describe('conversions waiting for each other through permits', () => {
  // read: shared; editor: at most one (limit 1), alongside readers; write: alone.
  const options = {
    locktimeouts: { read: 60_000, editor: 60_000, write: 60_000 },
    limits: { editor: 1 },
    lockRelationships: { read: { cooperative: ['write'] }, editor: { cooperative: ['write'] }, write: { cooperative: ['read', 'editor', 'write'] } },
  };

  it('a reader waiting to become the editor and the editor waiting to become the writer: one is refused at once (UpgradeConflict)', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const ml = multiLock({ collection, ...options });
    const reader = await ml.acquire({ _id: 'doc' }, { tag: 'read' });
    const editor = await ml.acquire({ _id: 'doc' }, { tag: 'editor' });
    // The reader's upgrade waits for the editor's permit (it marks the document)...
    const readerToEditor = settle(reader.convert('editor', { wait: 4_000 }));
    await sleep(300);
    // ...and the editor's upgrade would wait for the reader's read lock: each waits for the other.
    const started = Date.now();
    const editorToWriter = await settle(editor.convert('write', { wait: 2_000 }));
    const took = Date.now() - started;
    await readerToEditor;
    await Promise.all([reader.release(), editor.release()]);
    // "Two upgrades waiting for each other cannot be: the second is refused at once (UpgradeConflict)."
    expect({ editorToWriter, waitedItOut: took >= 2_000 }).to.deep.equal({ editorToWriter: 'UpgradeConflict', waitedItOut: false });
  });

  it('the same, the editor first: the reader\'s upgrade to editor is refused at once (UpgradeConflict)', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'doc' }]);
    const ml = multiLock({ collection, ...options });
    const reader = await ml.acquire({ _id: 'doc' }, { tag: 'read' });
    const editor = await ml.acquire({ _id: 'doc' }, { tag: 'editor' });
    const editorToWriter = settle(editor.convert('write', { wait: 3_000 }));
    await sleep(300);
    const started = Date.now();
    const readerToEditor = await settle(reader.convert('editor', { wait: 2_000 }));
    const took = Date.now() - started;
    await editorToWriter;
    await Promise.all([reader.release(), editor.release()]);
    expect({ readerToEditor, waitedItOut: took >= 2_000 }).to.deep.equal({ readerToEditor: 'UpgradeConflict', waitedItOut: false });
  });
});
