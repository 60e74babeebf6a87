#!/usr/bin/env bash
# `npm run check:package`: packs the package as `npm publish` would and checks the tarball:
# @arethetypeswrong/cli (every entry point resolves to types under node10, node16 CJS/ESM and
# bundler resolution), publint (package.json fields, files, exports), and a strict consumer
# (spec/types/strict-consumer: `exactOptionalPropertyTypes`, `skipLibCheck: false`) compiled
# against the packed declarations, and the examples compiled the same way, as a user compiles
# them (with joi installed: hapi's declarations import it, so hapi's real validation types are
# checked). Exits non-zero on a problem.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
tarball="$(npm pack --silent --pack-destination "$out" 2>/dev/null | tail -n 1)"
echo "packed $tarball ($(tar -tzf "$out/$tarball" | wc -l) files)"
npx --no-install attw "$out/$tarball" --format table-flipped --no-emoji --no-color
npx --no-install publint run "$out/$tarball" --strict

# The strict consumer, with the tarball installed as a user's node_modules/monglock has it, beside
# this repository's copies of its peer dependencies and their types.
consumer="$out/consumer"
mkdir -p "$consumer/node_modules"
tar -xzf "$out/$tarball" -C "$consumer/node_modules"
mv "$consumer/node_modules/package" "$consumer/node_modules/monglock"
for dependency in mongodb @hapi @opentelemetry @types bluebird commander joi; do
  ln -s "$PWD/node_modules/$dependency" "$consumer/node_modules/$dependency"
done
cp spec/types/strict-consumer/tsconfig.json spec/types/strict-consumer/*.ts "$consumer/"
npx --no-install tsc -p "$consumer" && echo "strict consumer: compiles against the packed declarations (exactOptionalPropertyTypes, skipLibCheck false)"
# The examples as a user has them: their imports of monglock resolve to the packed package.
mkdir -p "$consumer/examples"
cp examples/*.ts "$consumer/examples/"
# The same options but noPropertyAccessFromIndexSignature (a style the examples do not follow: process.env.X).
sed -e 's/"files": \["consumer.ts"\]/"include": ["examples"]/' -e '/noPropertyAccessFromIndexSignature/d' spec/types/strict-consumer/tsconfig.json > "$consumer/tsconfig.examples.json"
npx --no-install tsc -p "$consumer/tsconfig.examples.json" && echo "examples: compile against the packed declarations (exactOptionalPropertyTypes, skipLibCheck false, joi installed)"
