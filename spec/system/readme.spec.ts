import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { renderTargets } from '../../bench/targets';
import { mongoBackend, requireCapability } from '../support/fixture';
import type { BackendCapabilities } from '../../support/mongo-backend';
import { RESERVED_TAG_NAMES } from '../../lib/protocol/stored-format';
import { castsIn, codeBlocks, compileAlone } from '../support/code-blocks';

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

/** The files under `dir`, as paths relative to it, sorted. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)))
    .sort();
}

/** The pages whose code blocks a user copies: README.md and docs/*.md. */
const CODE_PAGES = PAGES.filter((page) => page === 'README.md' || page.startsWith('docs'));
const BLOCKS = CODE_PAGES.flatMap((page) => codeBlocks(ROOT, page));
const EXAMPLES = readdirSync(join(ROOT, 'examples')).filter((name) => name.endsWith('.ts'));

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

  it('every TypeScript or JavaScript block of README.md and docs/*.md is the readme region of a file under examples/ (which runs below, and `npm run typecheck` compiles), named on the line before it', () => {
    expect(BLOCKS.filter((block) => block.page === 'README.md').length, 'README.md blocks').to.be.at.least(5);
    expect(new Set(BLOCKS.map((block) => block.page)).size, 'pages with blocks').to.be.at.least(5);
    const include = (JSON.parse(read('tsconfig.json')) as { include: string[] }).include;
    expect(include, 'tsconfig.json (npm run typecheck) compiles examples/').to.include('examples');
    const wrong: string[] = [];
    for (const block of BLOCKS) {
      if (block.example === undefined) wrong.push(`${block.page}:${block.line}: no [examples/….ts](…) link (or <!-- example: … --> marker) on the line before:\n${block.code.slice(0, 200)}`);
      else if (block.code.trim() !== readmeRegion(block.example)) wrong.push(`${block.page}:${block.line}: not the readme region of ${block.example}`);
    }
    expect(wrong, 'blocks that are not an example file\'s region').to.deep.equal([]);
  });

  it('a block shown without a visible link to its complete file (an HTML comment shows nowhere) compiles as copied, on its own, in a strict project', function () {
    this.timeout(60_000);
    const alone = BLOCKS.filter((block) => !block.linked);
    expect(alone.length, 'the quick start at least is complete where it stands').to.be.at.least(1);
    expect(compileAlone(ROOT, alone), 'errors of blocks compiled on their own').to.deep.equal([]);
  });

  it('no block of README.md or docs/*.md, and no file under examples/, has a cast (`as never`, `as number[]`) or a non-null assertion (`!`): users copy them', () => {
    const found = [
      ...BLOCKS.flatMap((block) => castsIn(block.code).map((cast) => `${block.page}:${block.line}: ${cast}`)),
      ...EXAMPLES.flatMap((file) => castsIn(read(join('examples', file)), file).map((cast) => `examples/${file}: ${cast}`)),
    ];
    expect(found, 'casts and non-null assertions in code users copy').to.deep.equal([]);
  });

  it('the schema validation recipe (examples/schema-validation.ts) allows every key monglock stores in the lock field (the offline server ignores validators, so its run cannot tell)', () => {
    const example = readFileSync(join(ROOT, 'examples', 'schema-validation.ts'), 'utf8');
    const lockBlock = example.slice(example.indexOf('lock: {'), example.indexOf('// #endregion'));
    const allowed = [...lockBlock.matchAll(/^\s+(\w+): \{ bsonType/gm)].map((match) => match[1]).sort();
    const stored = [...RESERVED_TAG_NAMES].filter((key) => key !== 'active' && key !== 'timestamp').sort(); // v2's keys are not written
    expect(allowed).to.deep.equal(stored);
  });

  it('docs/api-reference/ is what `npm run docs` generates from the TSDoc now (the API reference users read on GitHub), with its front page', async function () {
    this.timeout(120_000);
    const out = mkdtempSync(join(tmpdir(), 'monglock-api-reference-'));
    try {
      await run(process.execPath, [join(ROOT, 'node_modules', 'typedoc', 'bin', 'typedoc'), '--out', out, '--logLevel', 'Warn'], { cwd: ROOT });
      const committed = filesUnder(join(ROOT, 'docs', 'api-reference'));
      const generated = filesUnder(out);
      expect(committed, 'the files of docs/api-reference (run `npm run docs` and commit them)').to.deep.equal(generated);
      const stale = generated.filter((file) => readFileSync(join(out, file), 'utf8') !== readFileSync(join(ROOT, 'docs', 'api-reference', file), 'utf8'));
      expect(stale, 'pages of docs/api-reference older than the TSDoc: run `npm run docs` and commit them').to.deep.equal([]);
      expect(read('docs/api-reference/README.md'), 'the front page says what each entry point holds').to.include('| `monglock/hapi` |');
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
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

  it('says which MongoDB versions and drivers it supports (the peer range), that the lock field shows in your documents and the projection that hides it, and links the API reference', () => {
    const peer = (JSON.parse(read('package.json')) as { peerDependencies: Record<string, string> }).peerDependencies.mongodb;
    const majors = [...peer!.matchAll(/\^(\d+)\.(\d+)\.0/g)].map(([, major, minor]) => `${major} (${major}.${minor}+)`);
    expect(majors, `the peer range ${peer}`).to.deep.equal(['6 (6.21+)', '7 (7.9+)']);
    expect(README, 'the supported servers and drivers').to.include(`**Supported:** MongoDB 4.4 and newer`).and.include(`the Node.js driver ${majors.join(' or ')}`);
    expect(README, 'the lock field in the documents, and how to hide it').to.match(/in its `lock` field[\s\S]{0,120}projection: \{ lock: 0 \}/);
    expect(README, 'the API reference in the documentation table').to.include('| [API reference](docs/api-reference/README.md) |');
  });

  for (const file of EXAMPLES) {
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
