#!/usr/bin/env bash
# A newcomer's first command, as the README writes it: runs the README's **Install** block line
# by line on this checkout (in CI a fresh clone, before anything else has built), in a fresh venv
# under target/ (so `pip` is the venv's), then checks what it installed: `python -m rcclx info`
# exits 0 with the library's kernels for sm_90 and the stock library 2.28.9 loaded.
set -euo pipefail
cd "$(dirname "$0")/.."
# The first fenced block after the line that starts with **Install**.
BLOCK="$(awk '/^\*\*Install\*\*/ { want = 1; next }
  want && /^```/ { if (inside) exit; inside = 1; next }
  inside { print }' README.md)"
[ -n "$BLOCK" ] || { echo "ci/readme-install.sh: no **Install** block in README.md" >&2; exit 1; }
VENV=target/readme-venv
rm -rf "$VENV"
mkdir -p target
python3 -m venv "$VENV"
export PATH="$PWD/$VENV/bin:$PATH"
echo "$BLOCK" | while IFS= read -r line; do
  cmd="${line%%#*}"
  [ -n "${cmd// /}" ] || continue
  echo "+ $cmd"
  bash -c "$cmd" </dev/null
done
STOCK="$(bash ci/fetch-nccl.sh | sed -n 's/^NCCL_2_28_LIB=//p')"
INFO="$(cd target && RCCLX_UPSTREAM_LIB="$STOCK" python -m rcclx info)"
echo "$INFO" | python -c '
import json, sys
d = json.load(sys.stdin)
stock = d.get("stock_library") or {}
print("  installed:", d.get("library"), "kernels", d.get("gpu_targets"), "stock", stock.get("version"))
sys.exit(not (d.get("gpu_targets") == ["sm_90"] and stock.get("version") == "2.28.9"))
' || { echo "ci/readme-install.sh: the installed package is not the README's (sm_90 kernels, stock 2.28.9)" >&2; exit 1; }
echo "ci/readme-install.sh: PASS"
