#!/bin/sh
# apps/common/check.sh APPS THREADS MODES - runs every app at -s tiny (seq once; native and
# squall with each thread count) and fails if any run exits non-zero, prints other than exactly
# one RESULT line, or reports verified=0. Used by `make -C apps check`.
apps="$1"; threads="$2"; modes="$3"
fail=0; runs=0
for app in $apps; do
  for mode in $modes; do
    bin="bin/${app}_${mode}"
    if [ "$mode" = seq ]; then tl=1; else tl="$threads"; fi
    for t in $tl; do
      if [ "$mode" = squall ]; then
        cmd="${SQUALL_RUN:-squall run -n 2} $bin -s tiny -t $t"
      else
        cmd="$bin -s tiny -t $t"
      fi
      out=$($cmd 2>&1); rc=$?
      runs=$((runs + 1))
      n=$(printf '%s\n' "$out" | grep -c '^RESULT ')
      line=$(printf '%s\n' "$out" | grep '^RESULT ')
      if [ $rc -ne 0 ] || [ "$n" -ne 1 ] || ! printf '%s\n' "$line" | grep -q ' verified=1 '; then
        echo "FAIL: $cmd (exit $rc, $n RESULT lines)"
        printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /'
        fail=$((fail + 1))
      else
        echo "ok   $line"
      fi
    done
  done
done
echo "check: $runs runs, $fail failed"
[ $fail -eq 0 ]
