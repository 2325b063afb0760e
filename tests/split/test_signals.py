"""A signal sent to the process runs the program's handler on the
program's own thread, never on a thread of the lower half (MPI's, the
checkpoint thread, the lazy restore's), where it would run on the lower
half's TLS: signals.c blocks SIGUSR1, sends it to the process, checks that
nobody took it, unblocks it and checks that its main thread ran the
handler, every iteration, through three checkpoint, SIGKILL and restart
cycles, on both MPIs.

Environment: STASIS_BIN, STASIS_BUILD."""
import pytest

from split_common import program_fixture
from test_ckpt import cycled

ITERS = 40
SLEEP_MS = 100


signals = program_fixture("signals")


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_process_signals_stay_with_the_program(signals, lower, tmp_path):
    rc, out, err = cycled(tmp_path, lower, 2, signals[lower], ITERS, SLEEP_MS)
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out and "FAIL" not in out, out + err
