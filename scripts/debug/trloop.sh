#!/bin/bash
# dbgloop.sh with the traced library (hlrc-trace.patch): every run writes its nodes' traces of
# the molecule pages into tr-ID-N/, kept (with out.log) only when the run fails.
# usage: trloop.sh ID BIN   (BIN built against the traced library; squall on PATH)
id=$1; bin=$2
i=0
while [ ! -e STOP ]; do
  i=$((i+1))
  d="$PWD/tr-$id-$i"; mkdir -p "$d"
  out=$(SQUALL_DBG_PAGES=2050-2193 SQUALL_DBG_DIR="$d" SQUALL_PEER_TIMEOUT_MS=60000 SQUALL_HEAP_SIZE=4G timeout 300 squall run -n 4 --transport tcp "./$bin" -t 8 -s small 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "verified=1" <<<"$out"; then
     echo "$out" > "$d/out.log"; echo "$(date +%T) $id run $i FAIL rc=$rc" >> "results-$id.txt"
  else
     rm -rf "$d"; echo "$(date +%T) $id run $i ok" >> "results-$id.txt"
  fi
done
