# Sourced by loop.sh and marathon.sh: the failure-free reference run, a run's digest, and what in
# a run's stderr counts as a defect (loop.sh's header says which lines do not). Needs P, S, NP,
# SPARES, PY and RUN; sets tmp (the run's files) and ref (the reference digests).
tmp=$(mktemp -d)
digest() { grep digest "$1" | tail -n 1 | "$PY" -c "import sys,json; d=json.load(sys.stdin); print(d['digest'], d['recoveries'])" 2>/dev/null; }
$RUN -n $NP --spares $SPARES -- $PY $P $S > $tmp/ref.out 2> $tmp/ref.err
ref=$(digest $tmp/ref.out); ref=${ref% *}
[ -n "$ref" ] || { echo "the failure-free run failed: $tmp/ref.err"; exit 1; }
# the lines of Open MPI's report of a SIGSEGV that the victim itself prints
victim_report='^(\[[^]]*:[0-9]+\] (\*\*\* (Process received signal|End of error message)|Signal: Segmentation|Signal code|Failing at address|\[ ?[0-9]+\] )|Fatal Python error: Segmentation fault$)'
# the job's MPI processes (not dpmpi-run, mpirun or timeout, whose command lines hold the program's
# too), one "PID RANK" line each (RANK: its OMPI_COMM_WORLD_RANK; a spawned one's world is its own)
mpi_pids() {
  for p in $(pgrep -f "python $P $S"); do
    r=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep '^OMPI_COMM_WORLD_RANK=' | cut -d= -f2)
    [ -n "$r" ] && echo "$p $r"
  done
}
# the first lines of the run's stderr (from line $1 + 1 on) that neither the failure-free run
# printed nor are known notices
bad_lines() {
  tail -n +$(($1 + 1)) $tmp/run.err | grep -a -v -F -x -f $tmp/ref.err | grep -a -E -i "OPAL ERROR|Traceback|error|warning" \
    | grep -a -v -e "dpmpi-run: " -e "NBC_Progress" -e "NBC_Start_round" -e "Send error after request freed" \
        -e "is not tested for post-failure" -e "osc_ucx_component.c" | grep -a -v -E "$victim_report" | head -3
}
