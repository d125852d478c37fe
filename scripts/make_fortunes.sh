#!/usr/bin/env bash
# Writes configs/data/fortunes.csv: the fortunes of a few of Debian's `fortunes` package files, one row each,
# with the file's name as the class. The CSV is committed, so nothing here runs in a build; run it again only
# to change the categories.
#   scripts/make_fortunes.sh [FORTUNES_DIR]   default /usr/share/games/fortunes (apt-get install fortunes)
# Fortunes are separated by lines holding "%"; each becomes one CSV cell, its line breaks kept, quotes
# doubled. Fortunes longer than 600 bytes (mostly poems and ASCII art) are left out.
set -euo pipefail
dir="${1:-/usr/share/games/fortunes}"
out="$(cd "$(dirname "$0")/.." && pwd)/configs/data/fortunes.csv"
categories=(computers food politics science sports)
tmp="$out.tmp.$$"
{
  echo "text,category"
  for c in "${categories[@]}"; do
    [ -f "$dir/$c" ] || { echo "make_fortunes: $dir/$c: no such file (apt-get install fortunes)" >&2; exit 1; }
    awk -v cat="$c" 'BEGIN { RS = "\n%\n" }
      {
        sub(/\n+$/, ""); sub(/^\n+/, "")
        if ($0 == "" || length($0) > 600) next
        gsub(/\t/, " "); gsub(/"/, "\"\"")
        printf "\"%s\",%s\n", $0, cat
      }' "$dir/$c"
  done
} >"$tmp"
mv "$tmp" "$out"
echo "make_fortunes: $(($(grep -c ',[a-z]*$' "$out") - 1)) rows in $out"
