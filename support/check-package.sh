#!/usr/bin/env bash
# `npm run check:package`: packs the package as `npm publish` would and checks the tarball:
# @arethetypeswrong/cli (every entry point resolves to types under node10, node16 CJS/ESM and
# bundler resolution) and publint (package.json fields, files, exports). Exits non-zero on a problem.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
tarball="$(npm pack --silent --pack-destination "$out" 2>/dev/null | tail -n 1)"
echo "packed $tarball ($(tar -tzf "$out/$tarball" | wc -l) files)"
npx --no-install attw "$out/$tarball" --format table-flipped --no-emoji --no-color
npx --no-install publint run "$out/$tarball" --strict
