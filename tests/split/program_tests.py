"""The two tests of a self-checking program of tests/split (topo.c,
comms.c, ...): it passes natively and above the other MPI's lower half
without a checkpoint, and through three checkpoint/kill/restart cycles on
either MPI or one restart under the other, printing "PASS ranks=N iterations=I
checks=K" with K what checks(N, I) expects.

    prog, test_runs, test_three_cycles = program_tests("topo", checks)

in a test module (pytest collects the three names there)."""
import pytest

from split_common import program_fixture, run_on
from test_ckpt import cycled


def program_tests(name, checks, args=lambda tmp_path: [], ranks=2, iters=20, sleep_ms=100,
                  after=None):
    """The fixture and the two tests of tests/split/<name>.c; args(tmp_path):
    its arguments after ITERATIONS and SLEEP_MS; ranks: how many the native
    run has; after(tmp_path, ranks, iterations), if given, checks what the
    program left behind after each passing run (its output files)."""
    prog = program_fixture(name)

    # (a program above its own MPI's lower half is test_three_cycles's
    # start, run to its end)
    @pytest.mark.parametrize("abi,lower", [("openmpi", None), ("mpich", None),
                                           ("openmpi", "mpich"), ("mpich", "openmpi")])
    def test_runs(prog, abi, lower, tmp_path):
        """Natively (lower None), and above the other MPI's lower half
        without a checkpoint."""
        r = run_on(prog[abi], lower, ranks, ["2", "10", *args(tmp_path)], tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"PASS ranks={ranks} iterations=2 checks={checks(ranks, 2)}\n" in r.stdout, \
            r.stdout + r.stderr
        if after:
            after(tmp_path, ranks, 2)

    @pytest.mark.parametrize("lower,other", [("openmpi", None), ("mpich", None),
                                             ("openmpi", "mpich"), ("mpich", "openmpi")])
    def test_three_cycles(prog, lower, other, tmp_path):
        """Three checkpoint, SIGKILL and restart cycles on lower, or one
        whose restart is above the other MPI."""
        rc, out, err = cycled(tmp_path, lower, 2, prog[lower], iters, sleep_ms, *args(tmp_path),
                              other=other)
        assert rc == 0, out + err
        assert f"PASS ranks=2 iterations={iters} checks={checks(2, iters)}\n" in out, out + err
        assert "FAIL" not in out
        assert "not supported" not in err, err
        if after:
            after(tmp_path, 2, iters)

    return prog, test_runs, test_three_cycles
