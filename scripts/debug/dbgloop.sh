#!/bin/bash
# Runs a Water build on 4 local nodes (tcp, 8 threads, size small) until the file STOP exists
# in the current directory; one line per run in results-ID.txt, a failed run's output in
# fail-ID-N.log. With TRACE=1 (a BIN built against the library with hlrc-trace.patch) each
# run's node traces of the molecule pages go to tr-ID-N/, kept only when the run fails.
# usage: [TRACE=1] dbgloop.sh ID BIN [VAR=value ...]   (squall on PATH)
id=$1; bin=$2; shift 2
i=0
while [ ! -e STOP ]; do
  i=$((i+1))
  trace=()
  if [ "${TRACE:-0}" = 1 ]; then
    d="$PWD/tr-$id-$i"; mkdir -p "$d"
    trace=(SQUALL_DBG_PAGES=2050-2193 "SQUALL_DBG_DIR=$d")
  fi
  out=$(env "$@" "${trace[@]}" SQUALL_PEER_TIMEOUT_MS=60000 SQUALL_HEAP_SIZE=4G timeout 300 squall run -n 4 --transport tcp "./$bin" -t 8 -s small 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "verified=1" <<<"$out"; then
     echo "$out" > "fail-$id-$i.log"; echo "$(date +%T) $id run $i FAIL rc=$rc" >> "results-$id.txt"
  else
     echo "$(date +%T) $id run $i ok" >> "results-$id.txt"
     [ -n "${d:-}" ] && rm -rf "$d"
  fi
done
