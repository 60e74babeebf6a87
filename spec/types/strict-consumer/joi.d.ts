// @hapi/hapi's declarations import these types from `joi`, which hapi neither depends on nor
// installs: a hapi user with `skipLibCheck: false` installs joi or declares them, as here.
// Nothing of monglock's declarations uses them.
declare module 'joi' {
  export type Root = unknown;
  export type Schema = unknown;
  export type SchemaMap = unknown;
  export type ValidationOptions = unknown;
  export type ObjectSchema<T = unknown> = { readonly rules?: T };
}
