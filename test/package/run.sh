#!/usr/bin/env bash
# Packs the library as npm would publish it, installs the tarball into throwaway host projects
# (Express 5 and Express 4), and runs one real flow from an ESM, a CommonJS and a strict TypeScript
# host (token, $init, SCIM create, FHIR writes, export through the worker pool, downloads).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# `npm pack` runs `prepack`, which builds dist/.
tarball="$(cd "$root" && npm pack --silent --pack-destination "$work" | tail -n 1)"
echo "packed $tarball"

for major in 5 4; do
  host="$work/host-express$major"
  mkdir -p "$host"
  cp "$root"/test/package/{flow.cjs,host-esm.mjs,host-cjs.cjs,host-ts.ts} "$host/"
  cat > "$host/package.json" <<JSON
{ "name": "fpk-host-express$major", "private": true, "type": "module" }
JSON
  cat > "$host/tsconfig.json" <<JSON
{
  "compilerOptions": {
    "strict": true,
    "exactOptionalPropertyTypes": true,
    "noUncheckedIndexedAccess": true,
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "target": "ES2022",
    "skipLibCheck": false,
    "types": ["node"],
    "outDir": "."
  },
  "files": ["host-ts.ts"]
}
JSON
  (
    cd "$host"
    npm install --no-audit --no-fund --loglevel=error "$work/$tarball" "express@^$major" \
      "@types/express@^$major" "@types/node@^20" "typescript@^5" > /dev/null
    npx --no-install tsc -p tsconfig.json
    export EXPRESS_MAJOR="$major"
    node host-esm.mjs
    node host-cjs.cjs
    node host-ts.js
  )
done
echo "package check: the tarball works from ESM, CJS and TypeScript on Express 5 and 4"
