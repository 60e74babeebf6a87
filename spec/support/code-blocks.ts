/**
 * The TypeScript blocks of the README and docs/, as a user copies them: which example file each
 * comes from, whether a reader sees that file's link, the casts and non-null assertions in it, and
 * whether it compiles on its own in a strict project.
 */
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

/** One fenced TypeScript or JavaScript block of a page. */
export interface CodeBlock {
  readonly page: string;
  /** 1-based line of its opening fence. */
  readonly line: number;
  readonly code: string;
  /** The file under examples/ the line before the block names, as a visible link or as an `<!-- example: … -->` marker. */
  readonly example: string | undefined;
  /**
   * True when that line is a link a reader sees (on GitHub and npm): the block may then be a
   * fragment of the file. An HTML comment is invisible: such a block must compile on its own.
   */
  readonly linked: boolean;
}

/** Every ```ts (typescript, js, javascript) block of `page` (a path under `root`). */
export function codeBlocks(root: string, page: string): CodeBlock[] {
  const text = readFileSync(join(root, page), 'utf8');
  const blocks: CodeBlock[] = [];
  for (const match of text.matchAll(/(?<=^|\n)([^\n]*)\n```(?:ts|typescript|js|javascript)\b[^\n]*\n([\s\S]*?)```/g)) {
    const before = match[1]!;
    const linked = /\[[^\]]*\]\((?:\.\.\/)?(examples\/[\w.-]+\.ts)\)/.exec(before)?.[1];
    const marker = /<!-- example: (examples\/[\w.-]+\.ts) -->/.exec(before)?.[1];
    const line = text.slice(0, match.index + before.length + 1).split('\n').length;
    blocks.push({ page, line, code: match[2]!, example: linked ?? marker, linked: linked !== undefined });
  }
  return blocks;
}

/** The casts (`as T` but `as const`, `<T>x`) and non-null assertions (`x!`) of TypeScript `code`, each with its text. */
export function castsIn(code: string, fileName = 'block.ts'): string[] {
  const source = ts.createSourceFile(fileName, code, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isNonNullExpression(node)) found.push(`non-null assertion: ${node.getText(source)}`);
    if (ts.isAsExpression(node) && !ts.isConstTypeReference(node.type)) found.push(`cast: ${node.getText(source)}`);
    if (ts.isTypeAssertionExpression(node)) found.push(`cast: ${node.getText(source)}`);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/**
 * Type-checks each of `blocks` as a file of its own (an ES module, so top-level `await` is
 * allowed), the way a strict user's project would (`strict`, `exactOptionalPropertyTypes`,
 * `noUncheckedIndexedAccess`), with `monglock` and its subpaths resolved to this repository's
 * sources. Returns the errors, each naming its page and line; none when every block compiles.
 */
export function compileAlone(root: string, blocks: readonly CodeBlock[]): string[] {
  if (blocks.length === 0) return [];
  mkdirSync(join(root, '.cache'), { recursive: true });
  // Inside the repository, so that `mongodb` and the other packages resolve from its node_modules.
  const dir = mkdtempSync(join(root, '.cache', 'code-blocks-'));
  try {
    const files = blocks.map((block, index) => {
      const file = join(dir, `${block.page.replace(/[/.]/g, '_')}_${block.line}_${index}.mts`);
      writeFileSync(file, block.code);
      return { file, block };
    });
    const options: ts.CompilerOptions = {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.Node16,
      moduleResolution: ts.ModuleResolutionKind.Node16,
      strict: true,
      exactOptionalPropertyTypes: true,
      noUncheckedIndexedAccess: true,
      noEmit: true,
      skipLibCheck: true,
      types: ['node'],
      paths: Object.fromEntries(['index', 'hapi', 'otel', 'bluebird'].map((entry) => [entry === 'index' ? 'monglock' : `monglock/${entry}`, [join(root, 'lib', `${entry}.ts`)]])),
    };
    const program = ts.createProgram(files.map(({ file }) => file), options);
    const errors: string[] = [];
    for (const { file, block } of files) {
      const source = program.getSourceFile(file)!;
      for (const diagnostic of [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)]) {
        const at = diagnostic.start === undefined ? 0 : source.getLineAndCharacterOfPosition(diagnostic.start).line;
        errors.push(`${block.page}:${block.line + 1 + at} (${relative(root, file)}): ${ts.flattenDiagnosticMessageText(diagnostic.messageText, ' ')}`);
      }
    }
    return errors;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
