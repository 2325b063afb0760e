"""A signal sent to the process runs the program's handler on the
program's own thread, never on a thread of the lower half (MPI's, the
checkpoint thread, the lazy restore's), where it would run on the lower
half's TLS: signals.c blocks SIGUSR1, sends it to the process, checks that
nobody took it, unblocks it and checks that its main thread ran the
handler, every iteration, through three checkpoint, SIGKILL and restart
cycles, on both MPIs.

Environment: STASIS_BIN, STASIS_BUILD."""
import re

import pytest

from split_common import launcher, program_fixture
from test_ckpt import MpiJob, cycled

ITERS = 40
SLEEP_MS = 100


signals = program_fixture("signals")


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
def test_process_signals_stay_with_the_program(signals, lower, tmp_path):
    rc, out, err = cycled(tmp_path, lower, 2, signals[lower], ITERS, SLEEP_MS)
    assert rc == 0 and f"PASS ranks=2 iterations={ITERS}" in out and "FAIL" not in out, out + err


crash = program_fixture("crash")


@pytest.mark.parametrize("restarted", [False, True])
def test_the_programs_crash_is_reported_by_mpis_handler(crash, restarted, tmp_path):
    """Rank 0 writes to address 8 (crash.c). Open MPI's SIGSEGV handler,
    installed by MPI_Init in the lower half, runs on the program's thread:
    it must find the lower half's TLS (lh_sig.c) and print its report as
    natively. Before, it ran on the upper half's and crashed in libc
    (__current_locale_name, under strsignal) before its second line, the
    cause of the rank's death lost. The same in a restarted job, whose
    fresh lower half installs its handlers again."""
    job = MpiJob(tmp_path)
    job.start(*launcher("openmpi", 2), crash["openmpi"], 40, SLEEP_MS, 25 if restarted else 3)
    if restarted:
        job.lines_until(r"rank 0 iteration [12]")
        job.checkpoint_kill_restart()
    rc, out, err = job.finish_job()
    assert rc != 0 and "PASS" not in out, out + err
    # its lines, each as natively (other lines may come between them)
    for line in (r"\*\*\* Process received signal \*\*\*", r"Signal: Segmentation fault \(11\)",
                 r"Signal code: Address not mapped \(1\)", r"Failing at address: 0x8",
                 r"\*\*\* End of error message \*\*\*"):
        assert re.search(r"^\[\S+:\d+\] " + line + "$", err, re.M), out + err
    assert "exited on signal 11" in out + err, out + err
