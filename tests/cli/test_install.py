"""`cmake --install` gives a prefix with the `stasis` binary, the public
headers, the libraries and stasis.pc, and a program built only from
`pkg-config --cflags --libs stasis` links and runs."""
import os
import pathlib
import subprocess

import pytest

from conftest import ROOT

BUILD = pathlib.Path(os.environ.get("STASIS_BUILD", ROOT / "build"))

PROGRAM = r"""
#include <common/config.h>
#include <common/crc32c.h>
#include <image/image.h>
#include <store/store.h>
#include <stasis_version.h>
#include <stdio.h>
int main(void)
{
	struct img_writer_opts o;

	if (cfg_load("/dev/null"))
		return 1;
	img_writer_opts_default(&o);
	printf("%s %zu %08x\n", STASIS_VERSION_STRING, o.chunk_size, crc32c(0, "123456789", 9));
	return 0;
}
"""


def test_install_prefix_and_pkg_config(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(prefix)], check=True,
                   capture_output=True)
    assert (prefix / "bin/stasis").is_file()
    for lib in ("libstasis_common.a", "libstasis_image.a", "libstasis_store.a"):
        assert (prefix / "lib" / lib).is_file(), lib
    for hdr in ("common/config.h", "common/err.h", "image/image.h", "store/store.h"):
        assert (prefix / "include/stasis" / hdr).is_file(), hdr
    assert not (prefix / "include/stasis/image/format.h").exists()   # private
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib/pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "stasis-core"], env=env, text=True,
                           check=True, capture_output=True).stdout.split()
    if "STASIS_SANITIZE:BOOL=ON" in (BUILD / "CMakeCache.txt").read_text():
        flags.append("-fsanitize=address,undefined")
    src = tmp_path / "p.c"
    src.write_text(PROGRAM)
    subprocess.run(["cc", "-std=c17", str(src), "-o", str(tmp_path / "p"), *flags], check=True)
    out = subprocess.run([str(tmp_path / "p")], text=True, check=True, capture_output=True).stdout
    assert out.split() == ["0.1.0", "4194304", "e3069283"]
    ver = subprocess.run([str(prefix / "bin/stasis"), "--version"], text=True,
                         capture_output=True).stdout
    assert ver == "stasis 0.1.0\n"
