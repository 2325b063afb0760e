#!/bin/bash
# Quick start: install dependencies, build, install, and run three short demos:
#  1. heatdis, a 4-rank MPI heat solver on two simulated nodes, checkpointing
#     at the PARTNER level: one rank is killed, its node's cache is wiped, and
#     the restarted job ends with a grid bit-identical to an uninterrupted run;
#  2. the store: checkpoint a data set, list it, verify it, extract it, then
#     corrupt a copy and watch Stasis refuse it;
#  3. an unmodified MPI program (examples/mpi_demo) under `stasis run` with
#     Open MPI: checkpointed, killed, restarted under MPICH, and its result
#     compared with an uninterrupted run's (docs/demo.md). Exits non-zero if
#     any demo fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --install build >/dev/null
echo "installed $(command -v stasis): $(stasis --version)"

src=$PWD
demo=$(mktemp -d /tmp/stasis-demo.XXXXXX)
trap 'rm -rf "$demo"' EXIT
cd "$demo"
run() { echo; echo "\$ $*"; "$@"; }

echo; echo "== 1. heatdis: kill a rank, lose its node's cache, restart"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STASIS_CONFIG=/dev/null
export STASIS_GLOBAL_DIR=$demo/global STASIS_LOCAL_DIR=$demo/local STASIS_JOB=heatdis
heatdis=$src/build/examples/heatdis/heatdis.openmpi
args=(--rows-per-rank 64 --cols 256 --iterations 400 --checkpoint-every 50 --level partner)
job() {  # two simulated nodes, two ranks each
	timeout -k 5 120 mpirun.openmpi --oversubscribe -np 2 -x STASIS_NODE=nodeA "$heatdis" "$@" : \
		-np 2 -x STASIS_NODE=nodeB "$heatdis" "$@"
}
STASIS_JOB=reference job "${args[@]}" --checkpoint-every 0 --output reference.bin
echo "(an uninterrupted run wrote reference.bin)"
echo; echo "\$ heatdis ... --kill-rank 2 --kill-iteration 230   # rank 2 dies"
job "${args[@]}" --kill-rank 2 --kill-iteration 230 --output restarted.bin 2>/dev/null || true
run rm -rf "$demo/local/nodeB"    # and its node's cache is gone
echo; echo "\$ heatdis ... (the same command again)"
job "${args[@]}" --kill-rank 2 --kill-iteration 230 --output restarted.bin
run cmp reference.bin restarted.bin && echo "restarted grid is bit-identical to the uninterrupted run"
run stasis ls --dir "$demo/global" heatdis
unset STASIS_GLOBAL_DIR STASIS_LOCAL_DIR STASIS_JOB

echo; echo "== 2. the store: save, list, verify, extract, refuse a damaged copy"
# A sample data set: a 32 MiB grid with empty (all-zero) regions, and a log.
python3 - <<'PY'
import math, os, struct
rows, cols = 1024, 4096
with open("grid.f64", "wb") as f:
    for r in range(rows):
        if (r // 128) % 2:
            f.write(bytes(cols * 8))
        else:
            f.write(struct.pack(f"{cols}d", *(math.sin(r * 0.01) * math.cos(c * 0.01) for c in range(cols))))
with open("run.log", "w") as f:
    f.write("".join(f"step {i} residual {1.0 / (i + 1):.6e}\n" for i in range(1000)))
PY
run stasis save --dir store --job demo grid.f64 run.log
run stasis save --dir store --job demo grid.f64 run.log
run stasis ls --dir store
run stasis inspect store/demo/ckpt-000002/files.img
run stasis verify store/demo
run stasis extract store/demo/ckpt-000002/files.img grid.f64 restored.f64
run cmp grid.f64 restored.f64 && echo "restored grid.f64 is bit-identical"
cp store/demo/ckpt-000002/files.img damaged.img
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(100000); b = f.read(1); f.seek(100000); f.write(bytes([b[0] ^ 0xff]))' damaged.img
echo; echo "\$ stasis verify damaged.img   # one byte flipped in a copy"
if stasis verify damaged.img; then
	echo "ERROR: a damaged image was accepted" >&2
	exit 1
fi
echo "(refused, as it must be)"

echo; echo "== 3. an unmodified MPI program: checkpoint under Open MPI, kill the job, restart under MPICH"
"$src/examples/mpi_demo/demo.sh" "$demo/mpi"
