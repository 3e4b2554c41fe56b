#!/bin/bash
# Programs nobody on the project wrote, killed from outside (docs/benchmarks.md, "Programs written
# from the README"). One failure-free run gives the reference digests; then RUNS jobs, each with a
# random process of the job (ACTIVE=1: an active rank only) sent SIGNAL after a random delay in
# [LO, HI] s (KILLS=2: two active ranks, GAP s apart, with SPARES=2). A run is ok when dpmpi-run
# exits 0, the digests equal the reference and stderr holds nothing but dpmpi-run's account, Open
# MPI's "NBC_Progress" / "Error in NBC_Start_round" notices (libnbc, e.g. a communicator's
# creation that a death cut short), dpmpi's documented "Send error after request freed" notice and a
# SIGSEGV victim's own backtrace (Open MPI's, and faulthandler's first line where the program
# enables it), and Open MPI's note that its topology module is "not tested for
# post-failure operation" (printed under --with-ft ulfm whenever a Create_cart is made), and its
# one-sided "osc_ucx_component.c ... Error" line (a window made on a machine without UCX devices).
# A job that dpmpi-run launched again after a death in its setup (docs/launcher.md) is judged on
# its last launch: the last digest line, the stderr after dpmpi-run's line saying so.
# A line the failure-free run printed too (a warning of dpmpi's about the program) is not counted.
#   bench/strangers/loop.sh PROGRAM STEPS RUNS [SIGNAL]     e.g. loop.sh runtime_mix.py 300 20
# (PY= and RUN= name another Python and dpmpi-run, e.g. the GPU check's .venv-gpu)
set -u
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
P=$here/$1; S=$2; N=$3; SIG=${4:-KILL}; SPARES=${SPARES:-1}; KILLS=${KILLS:-1}; GAP=${GAP:-0.03}
PY=${PY:-$root/.venv/bin/python}; RUN=${RUN:-$root/.venv/bin/dpmpi-run}; NP=$((4 + SPARES))
. "$here/common.sh"
ok=0
for i in $(seq 1 $N); do
  ( timeout 120 $RUN -n $NP --spares $SPARES -- $PY $P $S > $tmp/run.out 2> $tmp/run.err; echo $? > $tmp/run.rc ) &
  bg=$!
  d=$("$PY" -c "import random; print(round(random.uniform(${LO:-0.6}, ${HI:-2.0}), 2))")
  sleep $d
  victims=$(mpi_pids | while read -r p r; do [ -z "${ACTIVE:-}" ] || [ "$r" -lt 4 ] && echo $p; done | shuf -n $KILLS)
  first=1
  for v in $victims; do [ $first = 1 ] || sleep $GAP; first=0; kill -$SIG $v 2>/dev/null; done
  wait $bg
  rc=$(cat $tmp/run.rc); got=$(digest $tmp/run.out)
  # (a launch that a death in the setup ended and dpmpi-run launched again: its errors are the account's)
  from=$(grep -a -n "died in the program's setup, before any rank had committed" $tmp/run.err | tail -n 1 | cut -d: -f1)
  bad=$(bad_lines ${from:-0})
  if [ "$rc" = 0 ] && [ "${got% *}" = "$ref" ] && [ -z "$bad" ]; then ok=$((ok + 1)); st=ok; else st=BAD; cp $tmp/run.err $tmp/bad$i.err; cp $tmp/run.out $tmp/bad$i.out; fi
  echo "$i: after ${d}s, rc $rc, recoveries ${got##* }, $st: $(grep -a 'dpmpi-run:' $tmp/run.err | cut -c1-110)"
done
echo "ok $ok/$N (stderr of the others: $tmp)"
