"""find_package(Stasis CONFIG) on an installed prefix: a consumer project
configured with -DCMAKE_PREFIX_PATH=<prefix> only, built against the
imported targets (libstasis_serial.so, the static store), and run: it
checkpoints into a store that `stasis ls --json` then lists."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

from conftest import ROOT

BUILD = pathlib.Path(os.environ.get("STASIS_BUILD", ROOT / "build"))

CMAKELISTS = """
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(Stasis 0.1 CONFIG REQUIRED COMPONENTS serial core)
message(STATUS "Stasis ${Stasis_VERSION} in ${Stasis_DIR}")
add_executable(app app.c)
target_link_libraries(app Stasis::stasis_serial)
add_executable(core core.c)
target_link_libraries(core Stasis::stasis_store)
"""

APP = r"""
#include <stasis.h>
#include <stasis_version.h>
#include <stdio.h>
int main(void)
{
	int step = 0, ret = stasis_init_serial(NULL);

	if (ret) {
		fprintf(stderr, "init: %s\n", stasis_strerror(ret));
		return 1;
	}
	ret = stasis_protect(0, &step, 1, STASIS_INT);
	if (!ret && stasis_status() == STASIS_RESTARTED)
		ret = stasis_recover();
	for (int i = 0; !ret && i < 2; i++) {
		step++;
		ret = stasis_checkpoint(STASIS_LEVEL_GLOBAL);
	}
	if (ret) {
		fprintf(stderr, "%s\n", stasis_strerror(ret));
		return 1;
	}
	stasis_finalize();
	printf("%s step=%d\n", STASIS_VERSION_STRING, step);
	return 0;
}
"""

CORE = r"""
#include <common/crc32c.h>
#include <store/store.h>
#include <stdio.h>
int main(void)
{
	printf("%08x %s\n", crc32c(0, "123456789", 9), store_state_name(STORE_COMPLETE));
	return 0;
}
"""


def sanitized():
    return "STASIS_SANITIZE:BOOL=ON" in (BUILD / "CMakeCache.txt").read_text()


def configure(src, build, prefix, check=True):
    args = ["cmake", "-S", str(src), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}"]
    if sanitized():
        args.append("-DCMAKE_C_FLAGS=-fsanitize=address,undefined")
    return subprocess.run(args, text=True, capture_output=True, check=check)


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix")
    subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(p)], check=True,
                   capture_output=True)
    return p


def test_config_files_installed(prefix):
    d = prefix / "lib/cmake/Stasis"
    assert sorted(f.name for f in d.iterdir()) == ["StasisConfig.cmake",
                                                   "StasisConfigVersion.cmake"]
    # beside the pkg-config files
    assert (prefix / "lib/pkgconfig/stasis-serial.pc").is_file()


def test_consumer_builds_and_runs(prefix, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(CMAKELISTS)
    (src / "app.c").write_text(APP)
    (src / "core.c").write_text(CORE)
    r = configure(src, tmp_path / "b", prefix)
    assert f"Stasis 0.1.0 in {prefix}/lib/cmake/Stasis" in r.stdout, r.stdout
    subprocess.run(["cmake", "--build", str(tmp_path / "b")], check=True, capture_output=True)

    env = {k: v for k, v in os.environ.items() if not k.startswith("STASIS_")}
    env.update(STASIS_CONFIG="/dev/null", HOME=str(tmp_path), STASIS_JOB="consumer",
               STASIS_GLOBAL_DIR=str(tmp_path / "global"), STASIS_LOCAL_DIR=str(tmp_path / "local"))
    out = subprocess.run([str(tmp_path / "b/app")], env=env, text=True, capture_output=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "0.1.0 step=2\n"
    # a second run starts from the latest checkpoint
    out = subprocess.run([str(tmp_path / "b/app")], env=env, text=True, capture_output=True)
    assert out.stdout == "0.1.0 step=4\n", out.stderr
    # it ran on the installed library, not the build tree's
    ldd = subprocess.run(["ldd", str(tmp_path / "b/app")], text=True, capture_output=True).stdout
    assert f"{prefix}/lib/libstasis_serial.so.0" in ldd, ldd
    out = subprocess.run([str(tmp_path / "b/core")], text=True, capture_output=True, check=True)
    assert out.stdout == "e3069283 COMPLETE\n"

    ls = subprocess.run([str(prefix / "bin/stasis"), "ls", "--json", "--dir",
                         str(tmp_path / "global")], env=env, text=True, capture_output=True)
    assert ls.returncode == 0, ls.stderr
    jobs = json.loads(ls.stdout)["jobs"]
    assert [j["name"] for j in jobs] == ["consumer"]
    states = [(c["name"], c["state"], c["level"]) for c in jobs[0]["checkpoints"]]
    assert states[-1] == ("ckpt-000004", "CURRENT", "global"), states


def test_version_file_refuses_another_minor(prefix, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(c C)\n"
        "find_package(Stasis 0.2 CONFIG REQUIRED)\n")
    r = configure(src, tmp_path / "b", prefix, check=False)
    assert r.returncode != 0
    assert f"{prefix}/lib/cmake/Stasis/StasisConfig.cmake, version: 0.1.0" in r.stderr, r.stderr


def test_missing_component_is_an_error(prefix, tmp_path):
    """A component that was not installed fails find_package(REQUIRED)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(c C)\n"
        "find_package(Stasis CONFIG REQUIRED COMPONENTS serial)\n"
        "message(STATUS \"serial=${Stasis_serial_FOUND}\")\n")
    assert "serial=TRUE" in configure(src, tmp_path / "b", prefix).stdout
    copy = tmp_path / "p2"
    shutil.copytree(prefix, copy, symlinks=True)
    for f in (copy / "lib").glob("libstasis_serial.so*"):
        f.unlink()
    r = configure(src, tmp_path / "b2", copy, check=False)
    assert r.returncode != 0, r.stdout
