#!/usr/bin/env bash
# Makes this clone commit notebooks without outputs: nbstripout becomes its git filter for *.ipynb, so
# that a learner's executed lessons never reach git (and the next `git pull` does not conflict).
# Called by tools/setup_env.sh (`make lab`, `make test`); safe to run again: the settings stay the same.
#
#   bash tools/git_filter.sh [REPO] [PYTHON]   # defaults: this repository and its .venv's Python
#
# The filter lives in the clone's own settings (.git/config and .git/info/attributes): nothing tracked changes.
set -euo pipefail
repo="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
py="${2:-$repo/.venv/bin/python}"
say() { printf '[setup] %s\n' "$*"; }

top="$(git -C "$repo" rev-parse --show-toplevel 2>/dev/null || true)"
if [ -z "$top" ] || [ "$(cd "$top" && pwd -P)" != "$(cd "$repo" && pwd -P)" ]; then
  say "no git filter for notebooks: $repo is not the top of a git work tree (a copy without git needs none)"
  exit 0
fi
cd "$repo"
# filter.nbstripout.clean/smudge/required, diff.ipynb.textconv, and *.ipynb lines in .git/info/attributes
"$py" -m nbstripout --install
# Keep each cell's id: by default nbstripout renumbers them 0, 1, 2 ..., and the stored notebooks (which keep
# the ids JupyterLab gave them) would then differ from what git holds.
clean="$(git config filter.nbstripout.clean)"
git config filter.nbstripout.clean "$clean --keep-id"
git config diff.ipynb.textconv "$clean --keep-id -t"
say "git filter: notebooks are committed without outputs (nbstripout; see: $py -m nbstripout --status)"
