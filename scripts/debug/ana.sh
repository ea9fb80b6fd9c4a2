#!/bin/bash
# usage: ana.sh DIR PAGEHEX(0x852) T0 T1  -> merged trace lines naming the page (and GRANT/BARRIER lines) between T0 and T1 (ns)
d=$1; hex=$2; dec=$(printf "%d" $2); t0=$3; t1=$4
cat $d/sqdbg-*.log | awk -v t0=$t0 -v t1=$t1 -v a="page $hex " -v a2="page $hex]" -v b="PageId($dec)" '
  $1>=t0 && $1<=t1 && (index($0, a) || index($0, a2) || index($0, b) || /GRANT myvt|BARRIER|RELEASE_DONE/)' | sort -n
