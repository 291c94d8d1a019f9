#!/usr/bin/env bash
# Prints docs/migrating.md's block marked `<!-- run: NAME -->`, without its example
# assignments (`UPSTREAM_DB=...` lines: the calling script's values stand). Shared by
# scripts/import-upstream.sh and scripts/import-cyborg.sh, which run the walk-throughs as written.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $# == 1 ]] || { echo "usage: $0 BLOCK" >&2; exit 2; }
python3 - "$ROOT/docs/migrating.md" "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"<!-- run: %s -->\n```sh\n(.*?)```" % re.escape(sys.argv[2]), text, re.S)
if not m:
    sys.exit(f"docs/migrating.md has no block marked run: {sys.argv[2]}")
print("\n".join(l for l in m.group(1).splitlines() if not re.match(r"^[A-Z_]+=", l)))
PY
