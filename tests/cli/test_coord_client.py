"""The client's side of the coordinator's conversation (docs/coordinator.md)
while a coordinator starts where a killed one left its files: `stasis
standby &` then `stasis restart --standby` (test_standby.py's order) once
presented the killed coordinator's secret to the new one and failed with
"wrong secret" (a fresh clone's CI run, 2026-11-27). Against a stand-in
coordinator that replaces the stale secret only once it accepted the
connection, so the order is the same on every run. Under a second."""
import secrets

from fakecoord import FakeCoordinator


def test_a_secret_replaced_before_the_greeting_is_the_one_presented(stasis, tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    stasis.ok("save", "--dir", "store", "--job", "sim", "a.txt")   # ckpt-000001
    fake = FakeCoordinator(tmp_path / "store/sim", lambda req: "OK ckpt-000001 2 ranks 0.250",
                           stale=secrets.token_hex(16))
    try:
        r = stasis.run("restart", "--dir", "store", "--standby", "sim")
    finally:
        fake.close()
    assert (r.rc, r.out, r.err) == (
        0, "restart: ckpt-000001 restored into the stand-by's 2 ranks in 0.250 s\n", ""), r
    assert fake.requests == ["RESTORE ckpt-000001"]
