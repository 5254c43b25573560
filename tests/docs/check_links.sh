#!/usr/bin/env bash
# Checks that every relative Markdown link resolves: in README.md, every
# docs/**/*.md and every other *.md of the repository (tracked, or new and
# not ignored; never under node_modules/), each [text](path) and
# [text](path#anchor), and each reference definition "[name]: path", must
# name a file or directory that exists relative to the file's directory (a
# leading / means the repository root). Skipped: http(s)://, mailto: and
# other schemes, pure #anchors, and anything inside code (fenced blocks and
# `spans`). Anchors themselves are not checked.
#
#   tests/docs/check_links.sh [REPO_ROOT]
#
# Prints each broken link as FILE:LINE: TARGET and exits 1 if there is one;
# otherwise prints how many links it checked and exits 0. Checking no link
# at all is a failure too: a check that finds nothing proves nothing.
set -uo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$root" || { echo "check_links: no such directory: $root" >&2; exit 2; }

# The Markdown files, one per line, relative to the root.
list_files() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- '*.md'
  else
    find . \( -name .git -o -name node_modules -o -name build -o -name dist -o -name .cache \) -prune \
      -o -type f -name '*.md' -print | sed 's|^\./||'
  fi
}

# Prints LINE<TAB>TARGET for each link of file $1 outside code.
extract_links() {
  awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)           # inline code spans
      # reference definitions: [name]: target
      if (match(line, /^[ \t]*\[[^]]+\]:[ \t]*[^ \t]+/)) {
        def = substr(line, RSTART, RLENGTH)
        sub(/^[ \t]*\[[^]]+\]:[ \t]*/, "", def)
        print FNR "\t" def
        next
      }
      while (match(line, /\[[^]]*\]\([^)]*\)/)) {
        link = substr(line, RSTART, RLENGTH)
        line = substr(line, RSTART + RLENGTH)
        sub(/^\[[^]]*\]\(/, "", link)
        sub(/\)$/, "", link)
        print FNR "\t" link
      }
    }' "$1"
}

files=0 checked=0 broken=0
while IFS= read -r file; do
  [[ $file == *node_modules/* || ! -f $file ]] && continue
  files=$((files + 1))
  dir=$(dirname "$file")
  while IFS=$'\t' read -r line target; do
    target=${target#"${target%%[![:space:]]*}"}   # leading blanks
    target=${target%%[[:space:]]*}                # a "title" after the path
    target=${target#<}
    target=${target%>}
    [[ -z $target || $target == \#* ]] && continue
    [[ $target =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]] && continue   # http:, https:, mailto:, ...
    path=${target%%#*}
    path=${path%%\?*}
    path=${path//%20/ }
    if [[ $path == /* ]]; then
      resolved=.$path
    else
      resolved=$dir/$path
    fi
    checked=$((checked + 1))
    if [[ ! -e $resolved ]]; then
      echo "$file:$line: $target"
      broken=$((broken + 1))
    fi
  done < <(extract_links "$file")
done < <(list_files)

if ((broken > 0)); then
  echo "check_links: $broken broken of $checked links in $files Markdown files" >&2
  exit 1
fi
if ((checked == 0)); then
  echo "check_links: no links found in $files Markdown files under $root: nothing was checked" >&2
  exit 1
fi
echo "check_links: $checked links checked in $files Markdown files, all resolve"
