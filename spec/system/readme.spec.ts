import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { renderTargets } from '../../bench/targets';
import { mongoBackend, requireCapability } from '../support/fixture';
import type { BackendCapabilities } from '../../support/mongo-backend';
import { RESERVED_TAG_NAMES } from '../../lib/protocol/stored-format';

const run = promisify(execFile);
const ROOT = join(__dirname, '..', '..');
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
/** The pages whose links are checked (and, for README.md and docs/, code blocks): the README, every page under docs/, CONTRIBUTING.md and CHANGELOG.md. */
const PAGES = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((name) => name.endsWith('.md')).map((name) => join('docs', name)), 'CONTRIBUTING.md', 'CHANGELOG.md'];
const read = (page: string): string => readFileSync(join(ROOT, page), 'utf8');

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

/**
 * Checks that every TypeScript or JavaScript block of `page` follows an `<!-- example: examples/x.ts -->`
 * marker and is that file's readme region (so it compiles and runs); returns how many there are.
 */
function expectExampleBlocks(page: string): number {
  const blocks = [...read(page).matchAll(/(<!-- example: (\S+) -->\n)?```(?:ts|typescript|js|javascript)\b[^\n]*\n([\s\S]*?)```/g)];
  for (const [, marker, file, code] of blocks) {
    expect(marker, `${page}: a code block without an <!-- example: … --> marker:\n${code?.slice(0, 200)}`).to.be.a('string');
    expect(code!.trim(), `${page}: block of ${file}`).to.equal(readmeRegion(file!));
  }
  return blocks.length;
}

/** Markdown without its fenced code blocks and inline code spans, where a link is not a link. */
function prose(markdown: string): string {
  return markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/(`+)[\s\S]*?\1/g, '');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen; repeats get -1, -2, … */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  for (const [, heading] of markdown.replace(/^```[\s\S]*?^```/gm, '').matchAll(/^#{1,6}\s+(.+?)\s*#*$/gm)) {
    const base = heading!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    let anchor = base;
    for (let n = 1; anchors.has(anchor); n++) anchor = `${base}-${n}`;
    anchors.add(anchor);
  }
  return anchors;
}

describe('README and docs', () => {
  it('README.md is the page a user reads in two minutes: at most 300 lines', () => {
    expect(README.split('\n').length).to.be.at.most(300);
  });

  it('every relative link in README.md, docs/*.md, CONTRIBUTING.md and CHANGELOG.md points to an existing file, and its anchor exists', () => {
    const broken: string[] = [];
    for (const page of PAGES) {
      for (const [, target] of prose(read(page)).matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target!)) continue; // https:, mailto:
        const [path, anchor] = target!.split('#') as [string, string | undefined];
        const file = path === '' ? page : relative(ROOT, join(ROOT, dirname(page), decodeURIComponent(path)));
        if (!existsSync(join(ROOT, file))) {
          broken.push(`${page}: ${target} (no file ${file})`);
          continue;
        }
        if (anchor !== undefined && file.endsWith('.md') && !anchorsOf(read(file)).has(anchor)) broken.push(`${page}: ${target} (no heading #${anchor} in ${file})`);
      }
    }
    expect(broken).to.deep.equal([]);
  });

  it('every TypeScript or JavaScript block in docs/*.md is the readme region of a file under examples/', () => {
    const pages = PAGES.filter((name) => name.startsWith('docs'));
    expect(pages.length).to.be.at.least(5);
    for (const page of pages) expectExampleBlocks(page);
  });

  it('the schema validation recipe (examples/schema-validation.ts) allows every key monglock stores in the lock field (the offline server ignores validators, so its run cannot tell)', () => {
    const example = readFileSync(join(ROOT, 'examples', 'schema-validation.ts'), 'utf8');
    const lockBlock = example.slice(example.indexOf('lock: {'), example.indexOf('// #endregion'));
    const allowed = [...lockBlock.matchAll(/^\s+(\w+): \{ bsonType/gm)].map((match) => match[1]).sort();
    const stored = [...RESERVED_TAG_NAMES].filter((key) => key !== 'active' && key !== 'timestamp').sort(); // v2's keys are not written
    expect(allowed).to.deep.equal(stored);
  });

  it('bench/results/targets.md is what bench/targets.ts judges from the committed results (targets are never judged by hand)', () => {
    expect(read('bench/results/targets.md')).to.equal(renderTargets(join(ROOT, 'bench/results')));
    expect(read('docs/benchmarks.md')).to.include('(../bench/results/targets.md)');
  });
});

describe('README', () => {
  it('starts with the two commands: the demo, then the tests', () => {
    const quickStart = README.slice(README.indexOf('## Quick start'), README.indexOf('\n## ', README.indexOf('## Quick start') + 5));
    const commands = [...quickStart.matchAll(/^(npm [^\n#]+?)\s*(#.*)?$/gm)].map((match) => match[1]);
    expect(commands).to.deep.equal(['npm ci && npm run demo', 'npm test']);
    const scripts = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts as Record<string, string>;
    expect(scripts).to.include.keys('demo', 'test');
  });

  it('every TypeScript example is the readme region of a file under examples/', () => {
    expect(expectExampleBlocks('README.md')).to.be.at.least(5);
  });

  for (const file of readdirSync(join(ROOT, 'examples')).filter((name) => name.endsWith('.ts'))) {
    it(`examples/${file} runs`, async function () {
      this.timeout(60_000);
      // An example that needs what the backend lacks (`needs: transactions` in its header) is skipped, saying why.
      const needs = /^\s*\* needs: (\w+)/m.exec(readFileSync(join(ROOT, 'examples', file), 'utf8'))?.[1];
      if (needs) requireCapability(this, needs as keyof BackendCapabilities);
      const { stdout } = await run(process.execPath, ['--import', 'tsx', join('examples', file)], {
        cwd: ROOT,
        env: { ...process.env, MONGODB_URI: mongoBackend().uri },
      });
      expect(stdout.trim()).not.to.equal('');
    });
  }
});
