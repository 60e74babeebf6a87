import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { mongoBackend } from './support/fixture';

const run = promisify(execFile);
const ROOT = join(__dirname, '..');
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');

/** The lines between `// #region readme` and `// #endregion` of an example, dedented. */
function readmeRegion(file: string): string {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
  const start = lines.findIndex((line) => line.trim() === '// #region readme');
  const end = lines.findIndex((line, i) => i > start && line.trim() === '// #endregion');
  expect(start, `${file} has a readme region`).to.be.greaterThan(-1);
  const region = lines.slice(start + 1, end);
  const indent = Math.min(...region.filter((line) => line.trim()).map((line) => line.length - line.trimStart().length));
  return region.map((line) => line.slice(indent)).join('\n').trim();
}

describe('README', () => {
  it('starts with the two commands: the demo, then the tests', () => {
    const quickStart = README.slice(README.indexOf('## Quick start'), README.indexOf('\n## ', README.indexOf('## Quick start') + 5));
    const commands = [...quickStart.matchAll(/^(npm [^\n#]+?)\s*(#.*)?$/gm)].map((match) => match[1]);
    expect(commands).to.deep.equal(['npm ci && npm run demo', 'npm test']);
    const scripts = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts as Record<string, string>;
    expect(scripts).to.include.keys('demo', 'test');
  });

  it('every TypeScript example is the readme region of a file under examples/', () => {
    const blocks = [...README.matchAll(/(<!-- example: (\S+) -->\n)?```ts\n([\s\S]*?)```/g)];
    expect(blocks.length).to.be.at.least(6);
    for (const [, marker, file, code] of blocks) {
      expect(marker, `a ts block without an <!-- example: … --> marker:\n${code?.slice(0, 200)}`).to.be.a('string');
      expect(code!.trim(), `README block of ${file}`).to.equal(readmeRegion(file!));
    }
  });

  for (const file of readdirSync(join(ROOT, 'examples')).filter((name) => name.endsWith('.ts'))) {
    it(`examples/${file} runs`, async function () {
      this.timeout(60_000);
      const { stdout } = await run(process.execPath, ['--import', 'tsx', join('examples', file)], {
        cwd: ROOT,
        env: { ...process.env, MONGODB_URI: mongoBackend().uri },
      });
      expect(stdout.trim()).not.to.equal('');
    });
  }

  it('the demo runs (small smoke run) and reports every invariant held', async function () {
    this.timeout(120_000);
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'demo/demo.ts'], {
      cwd: ROOT,
      env: { ...process.env, MONGODB_URI: mongoBackend().uri, DEMO_REQUESTS: '300', DEMO_CLIENTS: '16' },
    });
    expect(stdout).to.match(/most handlers inside one document at once \| 1 \|/);
    expect(stdout).to.include('All invariants held.');
  });
});
