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


# what the lower half's MPI prints, as natively, when the program's
# thread faults (other lines may come between them), and how the
# launcher says the rank ended
REPORT = {
    "openmpi": ([r"\[\S+:\d+\] \*\*\* Process received signal \*\*\*",
                 r"\[\S+:\d+\] Signal: Segmentation fault \(11\)",
                 r"\[\S+:\d+\] Signal code: Address not mapped \(1\)",
                 r"\[\S+:\d+\] Failing at address: 0x8",
                 r"\[\S+:\d+\] \*\*\* End of error message \*\*\*"],
                "exited on signal 11"),
    # UCX's handler, installed when MPICH's libraries are loaded
    "mpich": ([r"\[\S+:\d+ *:\d+:\d+\] Caught signal 11 \(Segmentation fault: address not mapped "
               r"to object at address 0x8\)",
               r"==== backtrace \(tid: +\d+\) ====", r"={20,}"],
              "Segmentation fault (signal 11)"),
}


@pytest.mark.parametrize("lower", ["openmpi", "mpich"])
@pytest.mark.parametrize("restarted", [False, True])
def test_the_programs_crash_is_reported_by_mpis_handler(crash, lower, restarted, tmp_path):
    """Rank 0 writes to address 8 (crash.c). The SIGSEGV handler of the
    lower half's MPI (Open MPI's, installed by MPI_Init; UCX's under MPICH,
    installed when it is loaded) runs on the program's thread: it must find
    the lower half's TLS (lh_sig.c) and print its report as natively.
    Before, it ran on the upper half's and crashed in libc
    (__current_locale_name, under strsignal), its report cut short or
    missing: the cause of the rank's death lost. The same in a restarted
    job, whose fresh lower half has handlers of its own again."""
    job = MpiJob(tmp_path)
    job.start(*launcher(lower, 2), crash[lower], 40, SLEEP_MS, 25 if restarted else 3)
    if restarted:
        job.lines_until(r"rank 0 iteration [12]")
        job.checkpoint_kill_restart()
    rc, out, err = job.finish_job()
    assert rc != 0 and "PASS" not in out, out + err
    lines, ended = REPORT[lower]
    for line in lines:
        assert re.search("^" + line + "$", err, re.M), out + err
    assert ended in out + err, out + err
