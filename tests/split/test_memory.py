"""Upper-half memory, tracked positively (docs/split.md): as the split
process's upper half, everything an MPI program maps -- by malloc, mmap,
mremap, thread stacks, its ld.so at startup -- lies in the upper range
[0x100000000000, 0x201000000000), above either lower half and for a program
built with either MPI; the real MPI's libraries never lie there.

Environment: STASIS_BUILD (the build tree)."""
import subprocess

import pytest

from split_common import ENV, LH, TIMEOUT, launcher, program_fixture


progs = program_fixture("memory")


def run(cmd, cwd, env=ENV):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                       errors="replace")
    assert "Segmentation fault" not in r.stderr, r.stderr
    return r


def test_memory_native_is_outside(progs, tmp_path):
    """The check can fail: natively nothing puts the program in the range."""
    r = run(launcher("openmpi", 2) + [progs["openmpi"]], tmp_path)
    assert "PASS" not in r.stdout, r.stdout
    assert "FAIL malloc(64 MiB)" in r.stdout and "FAIL main at" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("abi,lower", [
    ("openmpi", "openmpi"), ("mpich", "mpich"),
    # the range does not depend on the MPI below
    ("mpich", "openmpi"), ("openmpi", "mpich"),
])
def test_memory_in_upper_range(progs, abi, lower, tmp_path):
    r = run(launcher(lower, 2) + [str(LH / f"stasis-lh-{lower}"), progs[abi]], tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "PASS", r.stdout + r.stderr


def test_fill_stage(progs, tmp_path):
    """The lower half fills the address space above the upper stack right
    before it jumps to the upper half's ld.so."""
    env = dict(ENV, STASIS_LOG="debug")
    r = run(launcher("openmpi", 1) + [str(LH / "stasis-lh-openmpi"), progs["openmpi"]], tmp_path,
            env)
    assert r.returncode == 0 and r.stdout.strip() == "PASS", r.stdout + r.stderr
    # "stasis: lower half: stage NAME (SECONDS)": CLOCK_MONOTONIC when it began
    stages = [line.split()[4] for line in r.stderr.splitlines()
              if line.startswith("stasis: lower half: stage ")]
    assert stages[-3:] == ["stack", "fill", "jump"], r.stderr
