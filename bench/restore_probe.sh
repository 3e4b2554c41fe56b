#!/bin/bash
# Where a 64 MiB restore's time goes on the lent device machine's CPUs (16 cores: no process
# shares one): plain MPI moving 64 MiB between two ranks against a memcpy (bench/transfer_probe.py,
# bound to cores and unbound), then each rank's phases in jobs of examples/jacobi.py and
# train_mlp.py at 4+1 with one kill (bench/restore_ranks.py). $OUT/restore_probe.log.
#   run: bash bench/restore_probe.sh   (carry ["bench/gpu_wheels"]; BENCH_BIN=... for a dry run)
set -u
REPO=$(pwd)
OUT=${OUT:-$REPO/bench/results}
mkdir -p "$OUT"
B=${BENCH_BIN:-}
if [ -z "$B" ]; then
  GPU_CHECK_SETUP_ONLY=1 GPU_CHECK_BACKEND=fake OUT=$OUT bash "$REPO/bench/gpu_check.sh" || { cat "$OUT/gpu_check.json"; exit 1; }
  B=$REPO/.venv-gpu/bin
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
LOG=$OUT/restore_probe.log
cd /tmp || exit 1
{
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"; lscpu | grep -E 'Model name|^CPU\(s\)|L3'
  for bind in core none; do
    echo "transfer, --bind-to $bind: $(timeout 30 "$B/mpirun" --allow-run-as-root -n 2 --bind-to $bind "$B/python" "$REPO/bench/transfer_probe.py" 64 2>&1 | tail -1)"
  done
  timeout 60 "$B/python" "$REPO/bench/restore_ranks.py" jacobi 4 4
  timeout 40 "$B/python" "$REPO/bench/restore_ranks.py" mlp 3 4 0.03
  timeout 30 "$B/python" "$REPO/bench/restore_ranks.py" jacobi 2 2
} >"$LOG" 2>&1
cat "$LOG"
