/**
 * The shape of lib/, checked: layers that use only the layers below them, a protocol layer that
 * is pure (no I/O) and is the only place that builds a lock's filters and updates, and files and
 * classes small enough to read (at most 300 and 200 lines).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { expect } from 'chai';

const LIB = join(__dirname, '..', '..', 'lib');
/** From the bottom up: a file may import from its own layer and the ones before it. */
const LAYERS = ['common', 'protocol', 'engine', 'waiting', 'locks', 'groups', 'resources', 'election', 'integrations'];

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sources(path) : name.endsWith('.ts') ? [path] : [];
  });
}

const files = sources(LIB).map((path) => ({ path, name: relative(LIB, path), text: readFileSync(path, 'utf8') }));
const layerOf = (name: string): number => LAYERS.indexOf(name.split('/')[0]!);
const importsOf = (text: string): string[] => [...text.matchAll(/^(?:import|export)[^'";]*?from '([^']+)'/gm)].map((match) => match[1]!);
/** Code without comments, for the checks on what code builds. */
const codeOf = (text: string): string => text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');

describe('the shape of lib/', () => {
  it('every file is in a layer folder, except the package entry points, which only re-export', () => {
    const entries = files.filter((file) => !file.name.includes('/'));
    expect(entries.map((file) => file.name).sort()).to.deep.equal(['bluebird.ts', 'cli.ts', 'hapi.ts', 'index.ts', 'otel.ts']);
    for (const file of files.filter((f) => f.name.includes('/'))) expect(layerOf(file.name), file.name).to.be.greaterThan(-1);
    for (const entry of entries.filter((file) => file.name !== 'cli.ts' && file.name !== 'bluebird.ts')) {
      const statements = codeOf(entry.text).split(';').map((statement) => statement.trim()).filter(Boolean);
      for (const statement of statements) expect(statement, entry.name).to.match(/^export (type )?(\*|\{[^}]*\}) from '/);
    }
  });

  it('each layer imports only from its own layer and the layers below it', () => {
    const violations: string[] = [];
    for (const file of files.filter((f) => f.name.includes('/'))) {
      for (const specifier of importsOf(file.text).filter((s) => s.startsWith('.'))) {
        const target = relative(LIB, resolve(dirname(file.path), specifier));
        if (layerOf(target) > layerOf(file.name)) violations.push(`${file.name} imports ${target}`);
      }
    }
    expect(violations).to.deep.equal([]);
  });

  it('the protocol layer is pure: no I/O, and only types from the driver', () => {
    for (const file of files.filter((f) => f.name.startsWith('protocol/'))) {
      for (const specifier of importsOf(file.text).filter((s) => !s.startsWith('.'))) {
        if (specifier === 'node:crypto') continue; // lock ids: randomness, not I/O
        expect(file.text, `${file.name} imports ${specifier}`).to.match(new RegExp(`import type [^;]* from '${specifier}'`));
        expect(file.text, `${file.name} imports ${specifier}`).not.to.match(new RegExp(`^import (?!type)[^;]* from '${specifier}'`, 'm'));
      }
      expect(codeOf(file.text), file.name).not.to.match(/\bawait\b|\basync\b|\.collection\b/);
    }
  });

  it('nothing outside the protocol layer builds a lock update', () => {
    const builders = files.filter((file) => !file.name.startsWith('protocol/') && /['"]?\$(pull|push|inc|currentDate|setOnInsert|unset|max)['"]?\s*:/.test(codeOf(file.text)));
    expect(builders.map((file) => file.name)).to.deep.equal([]);
  });

  it('no file is over 300 lines, no class over 200', () => {
    const large: string[] = [];
    for (const file of files) {
      const lines = file.text.split('\n');
      if (lines.length > 300) large.push(`${file.name}: ${lines.length} lines`);
      lines.forEach((line, start) => {
        if (!/^(export )?(abstract )?class \w+/.test(line)) return;
        const end = lines.findIndex((l, i) => i > start && l === '}');
        if (end - start + 1 > 200) large.push(`${file.name}: ${line.trim().slice(0, 60)}… ${end - start + 1} lines`);
      });
    }
    expect(large).to.deep.equal([]);
  });
});
