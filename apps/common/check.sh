#!/bin/sh
# apps/common/check.sh APPS THREADS MODES - runs every app at -s tiny (seq once; every other
# mode with each thread count) and fails if any run exits non-zero, prints other than exactly
# one RESULT line, or reports verified=0. Used by `make -C apps check` and `check-race`.
#
# Variants: if <app>/check_variants exists, each non-empty, non-# line is an extra set of
# app flags (e.g. `--sea`, `--padded`) run in every mode and thread count besides the plain run.
apps="$1"; threads="$2"; modes="$3"
fail=0; runs=0

run_one() { # $1 = command line
  out=$($1 2>&1); rc=$?
  runs=$((runs + 1))
  n=$(printf '%s\n' "$out" | grep -c '^RESULT ')
  line=$(printf '%s\n' "$out" | grep '^RESULT ')
  if [ $rc -ne 0 ] || [ "$n" -ne 1 ] || ! printf '%s\n' "$line" | grep -q ' verified=1 '; then
    echo "FAIL: $1 (exit $rc, $n RESULT lines)"
    printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /'
    fail=$((fail + 1))
  else
    echo "ok   $line"
  fi
}

for app in $apps; do
  variants="-"
  if [ -f "$app/check_variants" ]; then
    variants="$variants
$(grep -v '^[[:space:]]*#' "$app/check_variants" | grep -v '^[[:space:]]*$')"
  fi
  for mode in $modes; do
    bin="bin/${app}_${mode}"
    if [ "$mode" = seq ]; then tl=1; else tl="$threads"; fi
    for t in $tl; do
      printf '%s\n' "$variants" | while IFS= read -r v; do
        [ "$v" = "-" ] && v=""
        if [ "$mode" = squall ]; then
          echo "${SQUALL_RUN:-squall run -n 2} $bin -s tiny -t $t $v"
        else
          echo "$bin -s tiny -t $t $v"
        fi
      done > /tmp/appcheck.$$
      while IFS= read -r cmd; do
        run_one "$cmd"
      done < /tmp/appcheck.$$
      rm -f /tmp/appcheck.$$
    done
  done
done
echo "check: $runs runs, $fail failed"
[ $fail -eq 0 ]
