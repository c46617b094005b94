#!/usr/bin/env bash
# Runs the README's shell blocks as a new user would: in a fresh clone of HEAD (plus the working
# tree's uncommitted changes to tracked files), with `npm ci` for the Quick start's `npm install`.
#   - `npm start` on a free port, then the "Loading sample data" block (twice: it must survive a
#     second run) and the "Walk-through with curl" block against it;
#   - "Into your own Express app": its three shell blocks and its `my-app/server.mjs`, from the
#     directory that holds the clone (`npm pack`, a new my-app, `SEED=1 node server.mjs`, import and
#     Group export through the installed bin).
# The blocks run unchanged but for the substitutions listed in `subst` calls below (ports, and the
# placeholders for what a first start or a seeded server prints); each must match, so a README
# edit that drops one fails here. Every ```sh block of the README is either run or listed in
# `not_run` with the reason: a new block fails this test until it is classified. Afterwards the
# clone must hold no untracked file that .gitignore misses.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
readme="$root/README.md"
work="$(mktemp -d)"
clone="$work/fhir-platform-kit"
app="$work/my-app"
started=()
cleanup() {
  # Each server runs in its own process group (setsid below): npm, its shell and node stop together.
  for pid in "${started[@]}"; do kill -TERM -- "-$pid" 2> /dev/null || true; done
  wait
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "README test: $*" >&2
  exit 1
}

# block HEADING LANG N: the Nth ```LANG block of the README section `## HEADING`.
block() {
  local text
  text="$(awk -v heading="## $1" -v lang="$2" -v n="$3" '
    /^## / { inside = ($0 == heading) }
    inside && !open && $0 == "```" lang { count++; open = 1; next }
    open && /^```/ { open = 0; if (count == n) exit; next }
    open && count == n { print }
  ' "$readme")"
  [ -n "$text" ] || fail "no \`\`\`$2 block #$3 under '## $1' in README.md"
  printf '%s\n' "$text"
}

# subst TEXT FROM TO: TEXT with every FROM replaced by TO; FROM must occur.
subst() {
  [[ $1 == *"$2"* ]] || fail "expected '$2' in a README block (has the README changed?)"
  printf '%s\n' "${1//"$2"/"$3"}"
}

# Every ```sh block, counted by section: the sections run here, and those that are not.
declare -A run=(['Loading sample data']=1 ['Into your own Express app, under `/api`']=3 ['Walk-through with curl']=1)
declare -A not_run=(
  # `npm install && npm start` is how this test starts the server; `npm test` and
  # `npm run test:package` are CI steps of their own (.ci/run).
  ['Quick start']=1
  # lint, typecheck, build, test, bench: CI's own steps, or too long to repeat here.
  ['Development']=1
)
while IFS=$'\t' read -r count heading; do
  expected="${run[$heading]:-${not_run[$heading]:-0}}"
  [ "$count" = "$expected" ] ||
    fail "'## $heading' has $count \`\`\`sh blocks, this test knows $expected: run the new ones here, or list them in not_run"
done < <(awk '/^## / { heading = substr($0, 4) } /^```sh$/ { n[heading]++ } END { for (h in n) print n[h] "\t" h }' "$readme")

free_port() {
  node -e "const s = require('node:net').createServer().listen(0, '127.0.0.1', () => { console.log(s.address().port); s.close(); })"
}

# wait_http URL LOG PID: until URL answers 2xx, failing if PID exits first.
wait_http() {
  for _ in $(seq 1 120); do
    curl -sf -o /dev/null "$1" && return 0
    kill -0 "$3" 2> /dev/null || { cat "$2" >&2; fail "the server behind $1 exited"; }
    sleep 0.5
  done
  cat "$2" >&2
  fail "$1 did not answer within 60 s"
}

# run_block NAME DIR SCRIPT: runs SCRIPT with bash -euo pipefail in DIR; its output goes to
# $work/NAME.log (shown when it fails).
run_block() {
  local started_at=$SECONDS
  printf '%s\n' "$3" > "$work/$1.sh"
  # The CLI reads these: a caller's own must not change what the README's commands do.
  if ! (cd "$2" && env -u FPK_FHIR_URL -u FPK_CLIENT_ID -u FPK_CLIENT_SECRET -u FPK_PRIVATE_KEY -u FPK_SCOPE \
    timeout 240 bash -euo pipefail "$work/$1.sh") > "$work/$1.log" 2>&1; then
    echo "---- $1 (in $2):" >&2
    cat -n "$work/$1.sh" >&2
    echo "---- its output:" >&2
    tail -n 60 "$work/$1.log" >&2
    fail "the README block '$1' failed"
  fi
  echo "README block '$1': ok ($((SECONDS - started_at)) s)"
}

# lines FILE N: FILE has N lines.
lines() {
  [ -f "$1" ] || fail "$1 was not written"
  [ "$(wc -l < "$1")" = "$2" ] || fail "$1 has $(wc -l < "$1") lines, expected $2"
}

# A fresh clone of HEAD; uncommitted changes to tracked files come along, committed in the clone so
# that `git status` there shows only what the README's commands write.
git init -q "$clone"
git -C "$clone" fetch -q --depth 1 "file://$root" HEAD
git -C "$clone" checkout -q FETCH_HEAD
if ! git -C "$root" diff --quiet HEAD; then
  git -C "$root" diff --binary HEAD | git -C "$clone" apply --index
  git -C "$clone" -c user.name=readme-test -c user.email=readme-test@localhost commit -qm "working tree"
  echo "README test: with the working tree's uncommitted changes"
fi
(cd "$clone" && npm ci --no-audit --no-fund --loglevel=error > "$work/npm-ci.log" 2>&1) ||
  { cat "$work/npm-ci.log" >&2; fail "npm ci in the clone failed"; }

# Quick start: `npm start`, with the super-admin credentials chosen (README: "set
# SUPER_ADMIN_CLIENT_ID and SUPER_ADMIN_CLIENT_SECRET to choose them yourself").
port="$(free_port)"
secret="readme-test-$RANDOM$RANDOM$RANDOM"
(cd "$clone" && PORT="$port" SUPER_ADMIN_CLIENT_ID=super-admin SUPER_ADMIN_CLIENT_SECRET="$secret" \
  exec setsid npm start > "$work/serve.log" 2>&1) &
started+=("$!")
wait_http "http://localhost:$port/readyz" "$work/serve.log" "$!"

script="$(block 'Loading sample data' sh 1)"
script="$(subst "$script" 'localhost:8103' "localhost:$port")"
script="$(subst "$script" "'<SUPER_ADMIN_CLIENT_SECRET printed by the first start>'" "'$secret'")"
run_block command-line "$clone" "$script"
lines "$clone/export/Patient-1.ndjson" 2
lines "$clone/export/Observation-1.ndjson" 1
lines "$clone/export/Group-1.ndjson" 1
# Run twice, as a newcomer may paste it: `keys` keeps the pair of the first run (a `> jwks.json`
# redirection emptied that file before `keys` refused), and the rest makes another project with it.
run_block command-line-again "$clone" "$script"
lines "$clone/export/Patient-1.ndjson" 2
lines "$clone/export/Group-1.ndjson" 1

script="$(block 'Walk-through with curl' sh 1)"
script="$(subst "$script" 'localhost:8103' "localhost:$port")"
script="$(subst "$script" "'<printed secret>'" "'$secret'")"
run_block walk-through "$clone" "$script"
# curl -s answers errors with a body, not an exit code: the export's lines prove every step worked.
grep -q '"resourceType":"Patient"' "$work/walk-through.log" || fail "the walk-through exported no Patient"
grep -q '"resourceType":"Practitioner"' "$work/walk-through.log" || fail "the walk-through exported no Practitioner"
# Its Group export: the SCIM Group as a FHIR Group the identity provider owns, and both members.
grep '"resourceType":"Group"' "$work/walk-through.log" | grep -q 'scim-managed' ||
  fail "the walk-through's Group export holds no SCIM-managed Group"
grep -q '"family":"Roe"' "$work/walk-through.log" || fail "the walk-through's Group export holds no Max Roe"
grep -q '"family":"Kim"' "$work/walk-through.log" || fail "the walk-through's Group export holds no Lea Kim"

# Into your own Express app: from the directory that holds the clone.
run_block app-install "$work" "$(block 'Into your own Express app, under `/api`' sh 1)"
app_port="$(free_port)"
server="$(block 'Into your own Express app, under `/api`' ts 1)"
[[ $server == "// my-app/server.mjs"* ]] || fail "the first ts block of the app section is not my-app/server.mjs"
subst "$server" 'app.listen(3000)' "app.listen($app_port)" > "$app/server.mjs"
script="$(block 'Into your own Express app, under `/api`' sh 2)"
printf '%s\n' "$script" > "$work/app-serve.sh"
(cd "$app" && exec setsid bash -euo pipefail "$work/app-serve.sh" > "$work/app-serve.log" 2>&1) &
started+=("$!")
wait_http "http://localhost:$app_port/api/healthz" "$work/app-serve.log" "$!"
client="$(node -e "
  const line = require('node:fs').readFileSync(process.argv[1], 'utf8').split('\n').find((l) => l.includes('\"client\"'));
  if (!line) process.exit(1);
  console.log(JSON.parse(line).client);
" "$work/app-serve.log")" || { cat "$work/app-serve.log" >&2; fail "server.mjs printed no client"; }
script="$(block 'Into your own Express app, under `/api`' sh 3)"
script="$(subst "$script" "'<the \"client\" that server.mjs printed>'" "'$client'")"
script="$(subst "$script" 'localhost:3000' "localhost:$app_port")"
run_block app-export "$app" "$script"
lines "$app/export/Patient-1.ndjson" 2
lines "$app/export/Observation-1.ndjson" 1
lines "$app/export/Group-1.ndjson" 1

# Everything the README's commands wrote in the clone is covered by .gitignore.
untracked="$(git -C "$clone" ls-files --others --exclude-standard)"
[ -z "$untracked" ] || fail "the README's commands left files that .gitignore does not cover: $untracked"
echo "README test: every shell block of README.md ran as written in a fresh clone"
