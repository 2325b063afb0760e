#!/bin/bash
# Model-check the checkpoint protocol of an MPI job (model/ckpt.pml,
# docs/protocol.md) and its collective rule for ranks whose threads all call
# MPI (model/threads.pml, docs/protocol.md "Threads") with spin: exhaustive
# search of every configuration below for assertion violations and invalid
# end states (deadlocks).
#
#   correct models (each must pass: no error, no invalid end state):
#     main      two checkpoints one after the other, one failed image write
#     deadline  the same, and the coordinator may abort an attempt at any
#               moment of its quiesce phase (its deadline)
#     fail      the same as main, and a rank may die at any step of a
#               checkpoint (the second one finds the first established)
#     threads   2 ranks of 2 threads, each on its own communicator, 3
#               iterations (threads.pml)
#   broken models (each must be REFUSED, which shows the checks can fail):
#     nodrain    ranks skip the drain: a message in flight is lost (assertion)
#     notargets  snapshot without sequence targets: a collective half done (assertion)
#     norelease  no release of held collectives: the job deadlocks (invalid end state)
#     threads-norelease  threads.pml without the release: the rounds never end (assertion)
#     threads-norounds   threads.pml's snapshot without targets: a collective half done (assertion)
#
# Prints one line per run (states stored, seconds); on any failure, exits 1
# after one line saying what went wrong. Needs spin (Debian package `spin`)
# and gcc. MODEL_JOBS=N runs N searches at a time (default: the CPU count).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=$here/ckpt.pml

die() { echo "model/check.sh: $*" >&2; exit 1; }

command -v spin >/dev/null || die "spin is not installed (scripts/deps.sh installs the Debian package)"
command -v gcc >/dev/null || die "gcc is not installed"

work=$(mktemp -d "${TMPDIR:-/tmp}/stasis-model.XXXXXX")
trap 'rm -rf "$work"' EXIT

# name | expected (pass, assert, endstate) | spin -D flags
runs=(
	"main|pass|"
	"deadline|pass|-DNABORT=1"
	"fail|pass|-DFAIL"
	"nodrain|assert|-DBROKEN_NODRAIN -DNCKPT=1 -DNWFAIL=0"
	"notargets|assert|-DBROKEN_NOTARGETS -DNCKPT=1 -DNWFAIL=0"
	"norelease|endstate|-DBROKEN_NORELEASE -DNCKPT=1 -DNWFAIL=0"
	"threads|pass|-DK=3"
	"threads-norelease|assert|-DBROKEN_NORELEASE"
	"threads-norounds|assert|-DBROKEN_NOROUNDS"
)

source_of() {  # name: the model a run checks
	case $1 in
	threads*) echo "$here/threads.pml" ;;
	*) echo "$model" ;;
	esac
}

one() {  # name flags: generate, compile and run the verifier in its own directory
	local name=$1 flags=$2 dir=$work/$1
	mkdir -p "$dir"
	cd "$dir"
	cp "$(source_of "$name")" model.pml
	# shellcheck disable=SC2086
	spin $flags -a model.pml >spin.log 2>&1 || { echo "spin -a failed" >status; return 0; }
	gcc -O2 -DSAFETY -DCOLLAPSE -o pan pan.c >gcc.log 2>&1 || { echo "gcc failed" >status; return 0; }
	local t0=$SECONDS
	./pan -m20000 -w24 >pan.log 2>&1 || true
	echo $((SECONDS - t0)) >seconds
	echo ran >status
}

jobs_max=${MODEL_JOBS:-$(nproc 2>/dev/null || echo 1)}
for r in "${runs[@]}"; do
	IFS='|' read -r name _ flags <<<"$r"
	while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
		wait -n || true
	done
	one "$name" "$flags" &
done
wait

failed=""
for r in "${runs[@]}"; do
	IFS='|' read -r name want flags <<<"$r"
	dir=$work/$name
	status=$(cat "$dir/status" 2>/dev/null || echo "did not run")
	if [ "$status" != ran ]; then
		cat "$dir"/*.log >&2 2>/dev/null || true
		die "$name: $status"
	fi
	log=$dir/pan.log
	states=$(awk '/states, stored/ { print $1; exit }' "$log")
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$log" | head -n 1)
	printf '%-10s %-9s %10s states  %3ss  %s\n' "$name" "$want" "${states:-?}" \
		"$(cat "$dir/seconds")" "${flags:-(defaults)}"
	if grep -q 'max search depth too small' "$log"; then
		failed="$name: search depth too small (raise -m in model/check.sh)"
	elif grep -q 'out of memory' "$log"; then
		failed="$name: pan ran out of memory"
	fi
	[ -n "$failed" ] && break
	case $want in
	pass)
		if [ "$errors" != 0 ]; then
			what=$(grep -m1 -E '^pan:[0-9]+:' "$log" || echo "errors: $errors")
			failed="$name: the protocol model fails: $what (see docs/protocol.md; reproduce with: spin ${flags:+$flags }-a model/$(basename "$(source_of "$name")"))"
		elif [ -z "$states" ]; then
			failed="$name: pan did not finish its search"
		fi
		;;
	assert)
		grep -qE '^pan:[0-9]+: assertion violated' "$log" ||
			failed="$name: the broken model was not refused by an assertion (errors: ${errors:-?})"
		;;
	endstate)
		grep -qE '^pan:[0-9]+: invalid end state' "$log" ||
			failed="$name: the broken model did not deadlock (errors: ${errors:-?})"
		;;
	esac
	[ -n "$failed" ] && break
done
[ -z "$failed" ] || die "$failed"
echo "model/check.sh: the protocol model passes; the broken variants are refused"
