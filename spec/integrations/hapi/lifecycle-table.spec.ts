/**
 * The lifecycle table of docs/hapi.md, one case per cell (lifecycle-table.ts): each way hapi ends
 * a request, for each way a route holds its lock, over real HTTP (and through server.inject where
 * hapi treats it differently: a server timeout, a stop). Each case asserts what its cell says:
 * - no early answer: the lock is released before the status line goes out, or handed to the
 *   client as a checkout, except the exceptions the table lists with their note;
 * - an answer that does not lie: the status goes with the commit applied or not, as the cell says;
 * - a live checkout: the JSON handed out is of a lock above its keeper's margin, still held after.
 * And docs/hapi.md holds the table as lifecycle-table.ts renders it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { COLUMNS, markdownTable, ROWS, type Cell } from './lifecycle-table';
import { runCell, stopCellServers } from './lifecycle-probe';

const DOC = join(__dirname, '../../../docs/hapi.md');
const BEGIN = '<!-- lifecycle table: generated from spec/integrations/hapi/lifecycle-table.ts -->';
const END = '<!-- end of the lifecycle table -->';

describe('hapi: every way a locked request ends (the lifecycle table of docs/hapi.md)', function () {
  this.timeout(20_000);
  afterEach(stopCellServers);

  it('docs/hapi.md holds the table as lifecycle-table.ts renders it', () => {
    const text = readFileSync(DOC, 'utf8');
    const start = text.indexOf(BEGIN);
    const end = text.indexOf(END);
    expect(start >= 0 && end > start, `docs/hapi.md marks the table with ${BEGIN} … ${END}`).to.equal(true);
    expect(text.slice(start + BEGIN.length, end).trim(), 'the table of docs/hapi.md (regenerate it: npx tsx -e "console.log(require(\'./spec/integrations/hapi/lifecycle-table\').markdownTable())")').to.equal(markdownTable());
  });

  for (const row of ROWS) {
    for (const column of COLUMNS) {
      const cell = row.cells[column];
      if ('impossible' in cell) continue; // the table says why
      it(`${row.label} (${row.transport}) × ${column}`, async () => {
        const observed = await runCell(row, column);
        const expected: Omit<Cell, 'notes'> = { release: cell.release, status: cell.status, commit: cell.commit };
        expect(observed, `notes: ${cell.notes.join(', ') || 'none'}`).to.deep.equal(expected);
      });
    }
  }
});
