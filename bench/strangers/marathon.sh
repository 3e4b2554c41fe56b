#!/bin/bash
# Many deaths in one job (docs/benchmarks.md): one failure-free run gives the reference digests;
# then RUNS jobs, each losing DEATHS processes one after another, a random live process of the job
# (an idle spare, or a process that replaced another, as well as an original rank) sent SIG
# (default KILL) every GAP s from FIRST s on, with DPMPI_ON_DEPLETED=respawn so that spares never
# run out. A run is ok when dpmpi-run exits 0, the digests equal the reference and stderr holds
# none of loop.sh's error words (outside dpmpi-run's own lines and a SIGSEGV victim's report).
# Give the job enough steps to outlast the deaths: a death as the job ends is the end-of-job case
# of docs/limitations.md (OPAL ERROR / PMIX ERROR lines, or exit code 1, with right results).
#   bench/strangers/marathon.sh PROGRAM STEPS RUNS DEATHS     e.g. marathon.sh runtime_mix.py 3000 4 6
set -u
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
P=$here/$1; S=$2; N=$3; DEATHS=$4; SPARES=${SPARES:-1}; GAP=${GAP:-1.0}; FIRST=${FIRST:-1.0}; SIG=${SIG:-KILL}
PY=${PY:-$root/.venv/bin/python}; RUN=${RUN:-$root/.venv/bin/dpmpi-run}; NP=$((4 + SPARES))
export DPMPI_ON_DEPLETED=respawn
. "$here/common.sh"
ok=0
for i in $(seq 1 $N); do
  ( timeout 300 $RUN -n $NP --spares $SPARES -- $PY $P $S > $tmp/run.out 2> $tmp/run.err; echo $? > $tmp/run.rc ) &
  bg=$!
  sleep $FIRST
  killed=0
  while [ $killed -lt $DEATHS ] && kill -0 $bg 2>/dev/null; do
    v=$(mpi_pids | cut -d' ' -f1 | shuf -n 1)
    [ -n "$v" ] && kill -$SIG $v 2>/dev/null && killed=$((killed + 1))
    sleep $GAP
  done
  wait $bg
  rc=$(cat $tmp/run.rc); got=$(digest $tmp/run.out)
  bad=$(bad_lines 0)
  if [ "$rc" = 0 ] && [ "${got% *}" = "$ref" ] && [ -z "$bad" ]; then ok=$((ok + 1)); st=ok; else st=BAD; cp $tmp/run.err $tmp/bad$i.err; cp $tmp/run.out $tmp/bad$i.out; fi
  echo "$i: $killed killed, rc $rc, recoveries ${got##* }, $st: $(grep -a 'dpmpi-run:' $tmp/run.err | cut -c1-150)"
done
echo "ok $ok/$N (stderr of the others: $tmp)"
