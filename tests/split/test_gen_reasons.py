"""The reason of a refused function (functions.list, after ' -- ') reaches
the C and Fortran stand-ins as a C string literal: quotes and backslashes
in it are escaped, so a reason that holds them still builds and prints
as written (gen_wrappers.c_string, used by both generators)."""
import pathlib
import subprocess
import sys

MPI_SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "split" / "upper"
sys.path.insert(0, str(MPI_SRC))
from gen_wrappers import c_string  # noqa: E402


def test_reason_with_quotes_and_backslashes_prints_as_written(tmp_path):
    reason = 'needs "MPI_T" sessions \\ a C:\\path and a \\"quoted\\" word'
    src = tmp_path / "why.c"
    src.write_text('#include <stdio.h>\nint main(void)\n{\n'
                   f'\tfputs("{c_string(reason)}", stdout);\n\treturn 0;\n}}\n')
    exe = tmp_path / "why"
    subprocess.run(["cc", "-Wall", "-Werror", "-o", str(exe), str(src)], check=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True).stdout == reason


def test_fortran_stand_in_of_a_refused_function_builds(tmp_path):
    """gen_fortran.py's function for a 'no' line whose reason holds quotes
    compiles and names the reason as written."""
    reason = 'needs "quotes" \\ handled'
    flist = tmp_path / "functions.list"
    flist.write_text(f"no             int MPI_Foo_bar(int x) -- {reason}\n")
    out = tmp_path / "fortran.c"
    subprocess.run([sys.executable, str(MPI_SRC / "gen_fortran.py"),
                    "/usr/lib/x86_64-linux-gnu/openmpi/include/mpif.h", str(flist),
                    str(MPI_SRC / "uh_fortran.c"), str(out)], check=True)
    text = out.read_text()
    body = text[text.index("void mpi_foo_bar_(void)"):]
    body = body[:body.index("}") + 1]
    src = tmp_path / "stub.c"
    src.write_text("#include <stdio.h>\n"
                   "static void sts_unsupported_why(const char *f, const char *w)\n"
                   "{\n\tprintf(\"%s: %s\", f, w);\n}\n" + body +
                   "\nint main(void)\n{\n\tmpi_foo_bar_();\n\treturn 0;\n}\n")
    exe = tmp_path / "stub"
    subprocess.run(["cc", "-Wall", "-Werror", "-o", str(exe), str(src)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True).stdout
    assert got == f"MPI_Foo_bar (Fortran): {reason}"
