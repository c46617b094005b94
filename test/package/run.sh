#!/usr/bin/env bash
# Packs the library as npm would publish it, installs the tarball into throwaway host projects
# (Express 5 and Express 4), and runs one real flow from an ESM, a CommonJS and a strict TypeScript
# host (health, token, $init, SCIM create, FHIR writes, export through the worker pool, downloads),
# the installed `fhir-platform-kit` bin (keys, import, a Group export under /api) from the ESM host,
# and the storage contract suite from `fhir-platform-kit/testing` under the host's vitest.
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
    # pg, pg-cursor and pg-copy-streams are optional peer dependencies: the file-store hosts run
    # without them.
    if [ -e node_modules/pg ] || [ -e node_modules/pg-cursor ] || [ -e node_modules/pg-copy-streams ]; then
      echo "pg was installed although no host asked for it" >&2
      exit 1
    fi
    node host-esm.mjs
    node host-cjs.cjs
    node host-ts.js
    if [ "$major" = 5 ]; then
      # The testing subpath in use: vitest (the optional peer) runs the shipped contract suite.
      cp "$root/test/package/contract.test.mjs" .
      npm install --no-audit --no-fund --loglevel=error "vitest@^4" > /dev/null
      npx --no-install vitest run contract.test.mjs --reporter=dot
    fi
    # The PostgreSQL entry, once the host installs pg (on the test database, when there is one).
    if [ "$major" = 5 ] && [ -n "${FPK_TEST_POSTGRES_URL:-}" ]; then
      cp "$root"/test/package/{host-pg.ts,host-pg.cjs} .
      npm install --no-audit --no-fund --loglevel=error pg pg-cursor pg-copy-streams @types/pg > /dev/null
      sed -i 's/"host-ts.ts"/"host-ts.ts", "host-pg.ts"/' tsconfig.json
      npx --no-install tsc -p tsconfig.json
      node host-pg.js
      node host-pg.cjs
    elif [ "$major" = 5 ] && [ -n "${CI:-}" ]; then
      echo "FPK_TEST_POSTGRES_URL is required in CI (the PostgreSQL host)" >&2
      exit 1
    fi
  )
done
echo "package check: the tarball works from ESM, CJS and TypeScript on Express 5 and 4, without pg and with it, and its bin runs"
