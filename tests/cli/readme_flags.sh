#!/bin/bash
# README's flag table agrees with the code (issue 28): every flag a row of the table names
# exists in some subcommand's --help (flags.def), and where a row spells a flag's choices
# (`--precision mixed\|bf16\|fp32`) they are exactly the choices --help prints, in order.
# Arguments: WEIPIPE README.md
W=$1 README=$2
fails=0
help=$(for c in train simulate schedule eval sample export prepare check bench trace-merge; do "$W" $c --help 2>&1; done)
rows=$(grep '^| `--' "$README")
[ -n "$rows" ] || { echo "FAIL: no flag table in $README"; exit 1; }
n=0
for f in $(grep -o -- '--[a-z][a-z0-9-]*' <<< "$rows" | sort -u); do
  n=$((n + 1))
  grep -qE "^ +$f( |$)" <<< "$help" || { echo "FAIL: README's flag table names $f, which no subcommand takes"; fails=$((fails + 1)); }
done
# `--flag a\|b\|c` in a row: the choices as --help lists them between braces
while read -r f choices; do
  [ -n "$f" ] || continue
  want=$(grep -E "^ +$f " <<< "$help" | head -1 | sed -n 's/^ *--[a-z0-9-]* *{\([^}]*\)}.*/\1/p')
  if [ "$choices" != "$want" ]; then echo "FAIL: README says $f $choices, --help {$want}"; fails=$((fails + 1))
  else echo "ok: $f $choices"; fi
done < <(grep -o -- '`--[a-z-]* [a-z0-9-]*\(\\|[a-z0-9-]*\)\+`' <<< "$rows" | sed 's/`//g; s/\\|/|/g' | grep -v '|auto$\|DIR\|HF_DIR')
echo "$n flags named in README's table, each in some --help"
[ $fails -eq 0 ] || { echo "$fails mismatch(es)"; exit 1; }
