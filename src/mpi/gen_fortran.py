#!/usr/bin/env python3
"""Generate the Fortran stand-in's ABI description and its unsupported
functions (docs/split.md, "Fortran").

usage: gen_fortran.py MPIF_H FUNCTIONS_LIST UH_FORTRAN_C OUT_C

Reads the ABI's mpif.h (following its `include` lines) and writes OUT_C, a
C file included by uh_fortran.c (compiled against the same ABI's mpi.h):

  - STS_F_STATUS_SIZE and the 0-based indices of MPI_SOURCE, MPI_TAG and
    MPI_ERROR in a Fortran status (uh_fortran.c checks them against the C
    MPI_Status);
  - every COMMON block of mpif.h (their symbol names and sizes, as gfortran
    lays them out) and the addresses of MPI_BOTTOM, MPI_IN_PLACE,
    MPI_STATUS_IGNORE and MPI_STATUSES_IGNORE in them;
  - sts_fhandles[]: the predefined handles mpif.h declares (PARAMETERs of
    mpif-handles.h and mpif-io-handles.h in Open MPI's; none in MPICH's,
    where a Fortran handle is the C handle) that the C stand-in translates
    (gen_wrappers.py's PREDEF), with kind, Fortran value and C value, and
    STS_F_USER_OFFSET, a power of two above all of them;
  - one function per MPI function of FUNCTIONS_LIST that UH_FORTRAN_C does
    not define (mpi_x_ and pmpi_x_, gfortran's names): it names itself
    ("MPI_X (Fortran)") and aborts the job through sts_unsupported.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_wrappers import HANDLE_KINDS, PREDEF, read_list, write_if_changed  # noqa: E402

SIZES = {"integer": 4, "logical": 4, "real": 4, "double precision": 8, "character": 1}
SENTINELS = ["MPI_BOTTOM", "MPI_IN_PLACE", "MPI_STATUS_IGNORE", "MPI_STATUSES_IGNORE"]


def statements(path, seen=None):
    """(file name, statement) of path and the files it includes, comments
    removed (fixed form: C, c or * in column 1; ! anywhere)."""
    seen = seen if seen is not None else set()
    if path in seen:
        return
    seen.add(path)
    for line in open(path):
        if line[:1] in ("C", "c", "*"):
            continue
        line = line.split("!", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"include\s+['\"]([^'\"]+)['\"]", line, re.I)
        if m:
            inc = os.path.join(os.path.dirname(path), m.group(1))
            if os.path.exists(inc):
                yield from statements(inc, seen)
            continue
        yield os.path.basename(path), line


def split_top(text):
    """Comma-separated items, commas inside parentheses kept."""
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur.strip():
        items.append(cur.strip())
    return items


def evaluate(expr, params):
    expr = expr.strip()
    if re.fullmatch(r"[+-]?\d+", expr):
        return int(expr)
    if expr.upper() in params:
        return params[expr.upper()]
    raise SystemExit(f"gen_fortran.py: cannot evaluate {expr!r}")


def parse(mpif_h):
    params, param_file, sizes, commons = {}, {}, {}, []
    for fname, st in statements(mpif_h):
        m = re.fullmatch(r"parameter\s*\((.*)\)", st, re.I)
        if m:
            for item in split_top(m.group(1)):
                name, _, value = item.partition("=")
                name = name.strip().upper()
                try:
                    params[name] = evaluate(value, params)
                    param_file[name] = fname
                except SystemExit:
                    pass   # not an integer (a string, a real): not needed here
            continue
        m = re.fullmatch(r"common\s*/\s*(\w+)\s*/\s*(.*)", st, re.I)
        if m:
            commons.append((m.group(1).lower() + "_", [v.strip().upper() for v in m.group(2).split(",")]))
            continue
        m = re.fullmatch(r"(integer|logical|real|double precision|character)(\s*\*\s*\d+)?\s+(.*)",
                         st, re.I)
        if m and "function" not in st.lower():
            base = SIZES[m.group(1).lower()]
            if m.group(2):
                base = int(m.group(2).replace("*", ""))
            for item in split_top(m.group(3)):
                v = re.fullmatch(r"(\w+)\s*(?:\((.*)\))?", item)
                if not v:
                    continue
                n = base
                for d in split_top(v.group(2) or ""):
                    n *= evaluate(d, params)
                sizes[v.group(1).upper()] = n
    return params, param_file, sizes, commons


def kind_of(name):
    """The kind of a predefined handle the C stand-in translates (its
    PREDEF lists); None for the others (MPI_REAL16, MPI_2COMPLEX, MPI_LB,
    ...), which the C stand-in does not know either."""
    for k, names in PREDEF.items():
        if name in names:
            return k
    return None


def fortran_defined(path):
    return set(re.findall(r"^(?:void|double)\s+(mpi_\w+)_\(", open(path).read(), re.M))


def main():
    mpif_h, flist, uh_fortran, out_path = sys.argv[1:5]
    params, param_file, sizes, commons = parse(mpif_h)
    out = ["/* Generated by gen_fortran.py from " + mpif_h + ": do not edit.",
           " * The Fortran ABI of this MPI (included by uh_fortran.c). */", ""]
    out.append(f"#define STS_F_STATUS_SIZE {params['MPI_STATUS_SIZE']}")
    for f in ("SOURCE", "TAG", "ERROR"):
        out.append(f"#define STS_F_{f} {params['MPI_' + f] - 1}   /* 0-based */")
    out.append("")

    where = {}
    for sym, members in commons:
        off = 0
        for v in members:
            if v not in sizes:
                raise SystemExit(f"gen_fortran.py: no declaration of {v} (COMMON {sym})")
            where[v] = (sym, off)
            off += sizes[v]
        out.append(f"/* COMMON /{sym[:-1].upper()}/ {', '.join(members)} */")
        out.append(f"char {sym}[{off}] __attribute__((aligned(16)));")
    for s in SENTINELS:
        if s not in where:
            raise SystemExit(f"gen_fortran.py: {s} is in no COMMON block of {mpif_h}")
        sym, off = where[s]
        out.append(f"#define STS_F_{s[4:]} ((void *)({sym} + {off}))")
    out.append("")

    handles = [n for n in params if param_file[n] in ("mpif-handles.h", "mpif-io-handles.h")]
    known = sorted((n for n in handles if kind_of(n)), key=lambda n: (kind_of(n), params[n], n))
    out.append("static const struct sts_fhandle sts_fhandles[] = {")
    for n in known:
        out.append(f"#ifdef {n}\n\t{{ STS_{kind_of(n).upper()}, {params[n]}, STS_HVAL({n}) }},\n#endif")
    out.append("\t{ -1, 0, 0 }\n};")
    top = max([params[n] for n in handles] + [0])
    offset = 1 << top.bit_length()
    out.append("/* created handles are their neutral number plus this, above every predefined one */")
    out.append(f"#define STS_F_USER_OFFSET {offset}u")
    out.append("")

    defined = fortran_defined(uh_fortran)
    for f in read_list(flist):
        low = f.name.lower()
        if low in defined or f.name.startswith("MPI_T_") or re.search(r"_(c2f|f2c)$", low):
            continue
        out.append(f"void {low}_(void)\n{{\n\tsts_unsupported(\"{f.name} (Fortran)\");\n}}")
        out.append(f"void p{low}_(void) __attribute__((alias(\"{low}_\")));\n")
    write_if_changed(out_path, "\n".join(out) + "\n")


if __name__ == "__main__":
    if len(HANDLE_KINDS) != len(PREDEF):
        raise SystemExit("gen_fortran.py: gen_wrappers.py's kinds changed")
    main()
