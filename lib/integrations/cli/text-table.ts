/** `header` and `rows` as the CLI prints a table: columns padded to their widest cell, two spaces apart, no trailing blanks. */
export function textTable(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string[] {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)));
  return [header, ...rows].map((row) => row.map((cell, column) => cell.padEnd(widths[column]!)).join('  ').trimEnd());
}
