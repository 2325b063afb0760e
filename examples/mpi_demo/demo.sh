#!/bin/bash
# The quick start's MPI demo (docs/demo.md): jacobi2d.c, an ordinary MPI
# program built with Open MPI, runs on 4 ranks under `stasis run --
# mpirun.openmpi`; once it has printed some progress it is checkpointed,
# the whole job is killed, and `stasis restart --launcher "mpiexec.mpich -n
# 4"` brings it back above MPICH. Its result must be that of an
# uninterrupted run without Stasis: PASS, or FAIL and exit status 1 (any
# other failure on the way exits non-zero too).
#
#   examples/mpi_demo/demo.sh [WORKDIR]
#
# WORKDIR (kept) or a temporary directory (removed). Needs `stasis` on PATH
# (scripts/quickstart.sh installs it), mpicc.openmpi, mpirun.openmpi and
# mpiexec.mpich. One host; 5 to 17 s on 2 shared cores. DEMO_TIMEOUT (default
# 60): the seconds each MPI run, wait and checkpoint may take before the
# demo gives up. Every process it started is killed on any exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
limit=${DEMO_TIMEOUT:-60}
ranks=4
start_launcher="mpirun.openmpi --oversubscribe -np $ranks"
restart_launcher="mpiexec.mpich -n $ranks"
checkpoint_after="jacobi2d: step 2000/" # visible progress, then the checkpoint

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STASIS_CONFIG=/dev/null
unset STASIS_GLOBAL_DIR STASIS_LOCAL_DIR STASIS_JOB STASIS_RESTORE_DIR

if [ $# -gt 0 ]; then
	work=$1
	mkdir -p "$work"
	keep=1
else
	work=$(mktemp -d /tmp/stasis-mpi-demo.XXXXXX)
	keep=0
fi
work=$(cd "$work" && pwd)
cd "$work"
rm -rf ck ./*.out ./*.err

# What a kill takes: every process whose environment holds this demo's tag,
# which every job gets and passes on to the launcher, its daemons and the
# ranks (both launchers give local ranks their whole environment). Neither
# stasis's process group nor its session would do: Open MPI's mpirun puts
# each rank in a process group of its own, MPICH's hydra_pmi_proxy starts a
# session of its own, and ranks outlive a killed launcher for a second or so.
tag=$$.$RANDOM$RANDOM
job_pids() { # the processes of the demo's jobs that have not ended
	grep -lzx "MPI_DEMO_TAG=$tag" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 || true
}
kill_jobs() { # SIGKILL them all and wait until none is left
	local pids i
	for i in $(seq 100); do
		pids=$(job_pids)
		[ -z "$pids" ] && return 0
		# shellcheck disable=SC2086
		kill -KILL $pids 2>/dev/null || true
		sleep 0.1
	done
	echo "demo: could not kill $(echo $pids)" >&2
	return 1
}
cleanup() {
	local rc=$?
	trap - EXIT
	disown -a 2>/dev/null || true # no "Killed" notices from bash
	kill_jobs || rc=1
	cd /
	[ "$keep" = 1 ] || rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
	echo "demo: $*" >&2
	exit 1
}
show() { # a job's output or error file, when something went wrong
	[ -s "$1" ] && sed "s/^/  $1 | /" "$1" >&2 || true
}
start_job() { # start_job OUT ERR COMMAND...: in the background; sets job to its pid
	local out=$1 err=$2
	shift 2
	: >"$out" # before anyone waits for a line in it
	MPI_DEMO_TAG=$tag "$@" >"$out" 2>"$err" </dev/null &
	job=$!
}
wait_line() { # wait_line OUT ERR PATTERN: until the job's OUT has a line starting with PATTERN
	local end=$((SECONDS + limit))
	until grep -q -- "^$3" "$1"; do
		if ! kill -0 "$job" 2>/dev/null; then
			echo "demo: the job ended before printing '$3'" >&2
		elif [ $SECONDS -ge $end ]; then
			echo "demo: no '$3' within $limit s" >&2
		else
			sleep 0.05
			continue
		fi
		show "$1"
		show "$2"
		return 1
	done
}
wait_job() { # the job's exit status; past the time limit the demo fails (and kills it)
	local end=$((SECONDS + limit)) rc=0
	while kill -0 "$job" 2>/dev/null; do
		[ $SECONDS -lt $end ] || fail "the job did not end within $limit s"
		sleep 0.1
	done
	wait "$job" || rc=$?
	return $rc
}
result() { grep '^jacobi2d: done ' "$1" || true; }
since() { # seconds since $1 (date +%s%N), one decimal
	local ms=$((($(date +%s%N) - $1) / 1000000))
	echo "$((ms / 1000)).$((ms % 1000 / 100)) s"
}

t0=$(date +%s%N)
echo
echo "\$ mpicc.openmpi -O2 -o jacobi2d examples/mpi_demo/jacobi2d.c -lm"
mpicc.openmpi -O2 -o jacobi2d "$here/jacobi2d.c" -lm

echo
echo "\$ $start_launcher ./jacobi2d    # uninterrupted, without Stasis"
rc=0 t=$(date +%s%N)
# shellcheck disable=SC2086
MPI_DEMO_TAG=$tag timeout -k 5 "$limit" $start_launcher ./jacobi2d >reference.out 2>reference.err || rc=$?
[ $rc = 0 ] || { show reference.err; fail "the uninterrupted run failed (status $rc)"; }
reference=$(result reference.out)
[ -n "$reference" ] || fail "the uninterrupted run printed no result"
echo "$reference    ($(since "$t"))"

echo
echo "\$ stasis run --dir ck -- $start_launcher ./jacobi2d &"
t=$(date +%s%N)
# shellcheck disable=SC2086
start_job run.out run.err stasis run --dir ck -- $start_launcher ./jacobi2d
wait_line run.out run.err "$checkpoint_after" || exit 1
cat run.out
echo "(after $(since "$t"))"
echo "\$ stasis checkpoint --dir ck jacobi2d"
t=$(date +%s%N)
timeout -k 5 "$limit" stasis checkpoint --dir ck jacobi2d || { show run.err; fail "the checkpoint failed"; }
echo "($(since "$t"))"
n=$(job_pids | wc -l)
echo "\$ kill -KILL <every process of the job: stasis, mpirun, the ranks: $n>"
disown "$job" 2>/dev/null || true # no "Killed" notice from bash
kill_jobs || fail "could not kill the job"
awk -v p="$checkpoint_after" 'seen { print } index($0, p) == 1 { seen = 1 }' run.out # printed since
grep -q '^jacobi2d: done ' run.out && fail "the job ended before it was killed: nothing to restart"

echo
echo "\$ stasis restart --dir ck --launcher \"$restart_launcher\" jacobi2d"
t=$(date +%s%N)
start_job restart.out restart.err stasis restart --dir ck --launcher "$restart_launcher" jacobi2d
wait_line restart.out restart.err "jacobi2d: " || exit 1
lower=$(for p in $(job_pids); do tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null; echo; done |
	grep -o 'stasis-lh-[a-z]*' | sort | uniq -c | awk '{ printf "%s%d x %s", (NR > 1 ? ", " : ""), $1, $2 }' || true)
echo "(the ranks now run above: ${lower:-?})"
rc=0
wait_job || rc=$?
cat restart.out
echo "($(since "$t"))"
[ $rc = 0 ] || { show restart.err; fail "the restarted job failed (status $rc)"; }
restarted=$(result restart.out)

echo
echo "uninterrupted run:              ${reference:-(nothing)}"
echo "restarted under MPICH, resumed: ${restarted:-(nothing)}"
if grep -q 'steps=[0-9]* on ' restart.out; then
	echo "FAIL: the restarted job started over instead of resuming from the checkpoint"
	exit 1
fi
if [ -z "$restarted" ] || [ "$restarted" != "$reference" ]; then
	echo "FAIL: the job checkpointed under Open MPI and restarted under MPICH ends differently"
	exit 1
fi
echo "PASS: checkpointed under Open MPI, killed, restarted under MPICH: the same result, bit for bit ($(since "$t0"))"
