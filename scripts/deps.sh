#!/bin/bash
# Install every build and test dependency of Stasis from Debian's packages.
# Idempotent: apt-get runs (update + install) only when something is missing.
set -euo pipefail

PACKAGES=(
	build-essential cmake ninja-build pkg-config git  # toolchain
	libjansson-dev      # image manifests and index records (JSON)
	libzstd-dev         # optional per-chunk compression
	libisal-dev         # Reed-Solomon redundancy (ISA-L erasure codes)
	clang-14 libclang-rt-14-dev   # libFuzzer target over the image reader
	python3 python3-pytest        # CLI and integration tests
	time                          # GNU time, an exec-chain front end (tests/proc/test_exec.py)
	openmpi-bin libopenmpi-dev    # libstasis for Open MPI, MPI tests
	mpich libmpich-dev            # libstasis for MPICH, MPI tests
	gfortran                      # Fortran binding
	python3-numpy python3-mpi4py  # Python binding, mpi4py programs under the split process
	hpcc                          # HPC Challenge: a real application under the split process (tests/split)
	nwchem-openmpi nwchem-mpich   # NWChem: one-sided MPI (ARMCI-MPI windows) and ScaLAPACK under the split process (tests/split/test_apps.py)
	spin                          # model check of the MPI checkpoint protocol (model/)
	iproute2 util-linux           # scripts/cluster.sh: nodes as namespaces on a bridge
	munge slurmctld slurmd slurm-client   # scripts/cluster.sh: a real Slurm across the simulated nodes
	python3-matplotlib            # bench/scale's plot
)

missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps.sh: missing packages: ${missing[*]}; run as root to install them" >&2
	exit 1
fi
echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
