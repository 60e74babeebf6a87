/** A failure of a `monglock` command to report in one line, with its exit code (1 failed, 2 usage). */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}
