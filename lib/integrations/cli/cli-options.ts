/** The options every `monglock` command that opens a collection shares. */
import { InvalidArgumentError, Option, type Command } from 'commander';
import { SAFE_NAME } from '../../common/validation';

/** `--field`: a name that is one field (no `$`, no `.`), as the library accepts it. */
function fieldName(value: string): string {
  if (!SAFE_NAME.test(value)) throw new InvalidArgumentError('expected 1-64 letters, digits, `_` or `-` (the lock field of the documents, `lock` by default)');
  return value;
}

/**
 * Adds `--uri` (or `MONGODB_URI`), `--db`, `--collection` and `--field` to `command`, which refuses
 * a stray word. Commander's help does not mark a mandatory option: its usage line and description do.
 */
export function collectionOptions(command: Command): Command {
  return command
    .usage('--uri <uri> --db <name> --collection <name> [options]')
    .allowExcessArguments(false) // a stray word (`all` for `--all`, a second _id) is a usage error, never ignored
    .addOption(new Option('--uri <uri>', 'MongoDB connection string (required)').env('MONGODB_URI').makeOptionMandatory())
    .requiredOption('--db <name>', 'database (required)')
    .requiredOption('--collection <name>', 'collection (required)')
    .option('--field <name>', 'the lock property of document locks', fieldName, 'lock');
}
