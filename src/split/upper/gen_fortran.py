#!/usr/bin/env python3
"""Generate the Fortran stand-in's ABI description and its unsupported
functions (docs/split.md, "Fortran").

usage: gen_fortran.py MPIF_H FUNCTIONS_LIST UH_FORTRAN_C OUT_C
       gen_fortran.py --handles MPIF_H OUT_C

Reads the ABI's mpif.h (following its `include` lines) and writes OUT_C, a
C file included by uh_fortran.c (compiled against the same ABI's mpi.h):

  - STS_F_STATUS_SIZE and the 0-based indices of MPI_SOURCE, MPI_TAG and
    MPI_ERROR in a Fortran status (uh_fortran.c checks them against the C
    MPI_Status);
  - every COMMON block of mpif.h (their symbol names and sizes, as gfortran
    lays them out) and the addresses of MPI_BOTTOM, MPI_IN_PLACE,
    MPI_STATUS_IGNORE and MPI_STATUSES_IGNORE in them;
  - after `#ifdef STS_F_FUNCTIONS` (uh_fortran.c includes OUT_C a second
    time, at its end, with its helpers defined), one function per MPI
    function of FUNCTIONS_LIST that UH_FORTRAN_C does not define (mpi_x_
    and pmpi_x_, gfortran's names): generated from the C prototype when
    every parameter is of a kind fortran_call() translates (integers and
    address-sized integers by reference, handles and arrays of them,
    buffers, statuses, strings with gfortran's hidden lengths, 1-based
    indices), calling the C stand-in's PMPI_X; otherwise, or if the
    function takes a callback, an attribute or memory of MPI's, one that
    names itself ("MPI_X (Fortran)") and aborts the job through
    sts_unsupported_why (the list's reason, or FORTRAN_WHY).

With --handles, OUT_C is instead a C file included by the C stand-in's
uh_conv.c (Open MPI's ABI: in MPICH's a Fortran handle is the C handle):
sts_fhandles[], the predefined handles mpif.h declares (PARAMETERs of
mpif-handles.h and mpif-io-handles.h) that the C stand-in translates
(gen_wrappers.py's PREDEF), with kind, Fortran value and C value, and
STS_F_USER_OFFSET, a power of two above all of them.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_wrappers import BUFFERS, HANDLE_KINDS, PREDEF, c_string, read_list, write_if_changed  # noqa: E402

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


def handles_table(mpif_h, out_path):
    """The --handles output, for the C stand-in (uh_conv.c): sts_fhandles[]
    and STS_F_USER_OFFSET."""
    params, param_file, _, _ = parse(mpif_h)
    out = ["/* Generated by gen_fortran.py --handles from " + mpif_h + ": do not edit.",
           " * The predefined Fortran handles of this MPI's ABI (included by uh_conv.c). */"]
    handles = [n for n in params if param_file[n] in ("mpif-handles.h", "mpif-io-handles.h")]
    known = sorted((n for n in handles if kind_of(n)), key=lambda n: (kind_of(n), params[n], n))
    out.append("static const struct sts_fhandle sts_fhandles[] = {")
    for n in known:
        out.append(f"#ifdef {n}\n\t{{ STS_{kind_of(n).upper()}, {params[n]}, STS_HVAL({n}) }},\n#endif")
    out.append("\t{ -1, 0, 0 }\n};")
    top = max([params[n] for n in handles] + [0])
    offset = 1 << top.bit_length()
    out.append("/* any other handle is its neutral number plus this, above every predefined one */")
    out.append(f"#define STS_F_USER_OFFSET {offset}u")
    write_if_changed(out_path, "\n".join(out) + "\n")


def main():
    if sys.argv[1] == "--handles":
        handles_table(sys.argv[2], sys.argv[3])
        return
    mpif_h, flist, uh_fortran, out_path = sys.argv[1:5]
    params, param_file, sizes, commons = parse(mpif_h)
    out = ["/* Generated by gen_fortran.py from " + mpif_h + ": do not edit.",
           " * The Fortran ABI of this MPI (included by uh_fortran.c), then its",
           " * functions (included again at its end, STS_F_FUNCTIONS defined). */",
           "#ifndef STS_F_FUNCTIONS"]
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

    out.append("#else   /* included again, at the end of uh_fortran.c */")
    defined = fortran_defined(uh_fortran)
    for f in read_list(flist):
        low = f.name.lower()
        if low in defined or f.name.startswith("MPI_T_") or re.search(r"_(c2f|f2c)$", low):
            continue
        body = fortran_call(f) if f.status != "no" else None
        if body:
            out.append(body)
        else:   # refused, saying why (gen_wrappers.py: the list's reason)
            why = f.why if f.status == "no" else FORTRAN_WHY
            out.append(f"void {low}_(void)\n{{\n\tsts_unsupported_why(\"{f.name} (Fortran)\", "
                       f"\"{c_string(why)}\");\n}}")
        out.append(f"PMPI_ALIAS({low});\n")
    out.append("#endif")
    write_if_changed(out_path, "\n".join(out) + "\n")


# by-value C types a Fortran program passes by reference, the same size
SCALARS = {"int", "MPI_Aint", "MPI_Offset", "MPI_Count"}
# C functions whose Fortran binding is not the C one's by reference: memory
# of MPI's, attribute values (address-sized in Fortran), callbacks with
# Fortran signatures, a variadic one, and MPI_Info_get, whose valuelen
# bounds its string (the generic rule's buffer would not), and the
# distributed graph's weights (MPI_UNWEIGHTED is a COMMON variable in
# Fortran, which the generic rule would pass as an array of weights)
NOT_MECHANICAL = re.compile(r"attr|keyval|_mem$|errhandler|Pcontrol|^MPI_Op_create$|^MPI_Aint_"
                            r"|^MPI_Info_get$|^MPI_Dist_graph_create|^MPI_Dist_graph_neighbors$",
                            re.I)
# why a function the C stand-in supports has no Fortran binding here
FORTRAN_WHY = ("its Fortran binding is not the C one's by reference (callbacks, attribute "
               "values, handle or weight arrays, sentinels): it needs one written in uh_fortran.c")
# 0-based in C, 1-based in Fortran (MPI-3.1 17.1.x: the index arguments)
INDEX_OUT = {("MPI_Waitany", "index"): "one", ("MPI_Testany", "index"): "one",
             ("MPI_Waitsome", "array_of_indices"): "outcount",
             ("MPI_Testsome", "array_of_indices"): "outcount"}


def count_for(f, i):
    """The by-value int parameter before parameter i that counts its array."""
    for p in reversed(f.params[:i]):
        if p.type == "int" and not p.array and "count" in p.name:
            return p.name
    return None


def fortran_call(f):
    """The C text of f's Fortran binding, or None when a parameter is of a
    kind not translated here."""
    if f.ret != "int" or NOT_MECHANICAL.search(f.name):
        return None
    low = f.name.lower()
    fargs, cargs, pre, post, hidden = [], [], [], [], []
    allocs, frees = [], []   # names of the memory taken before the call
    for i, p in enumerate(f.params):
        n, kind = p.name, p.kind()
        if p.type == "...":
            return None
        if p.ptr == 0 and p.base in SCALARS:
            fargs.append(f"{p.base} *f_{n}")
            cargs.append(f"*f_{n}")
        elif p.ptr == 0 and kind:
            fargs.append(f"MPI_Fint *f_{n}")
            cargs.append(f"(MPI_{kind})(STS_HCAST)f2c(STS_{kind.upper()}, *f_{n})")
        elif p.ptr == 1 and p.base in SCALARS:
            fargs.append(f"{p.base} *f_{n}")
            # MPI_Group_range_incl's ranges(3, n): C's int [n][3], the same ints
            cargs.append(f"(int (*)[3])f_{n}" if p.suffix == "[][3]" else f"f_{n}")
            idx = INDEX_OUT.get((f.name, n))
            if idx == "one":
                post.append(f"if (*ierr == MPI_SUCCESS && *f_{n} != MPI_UNDEFINED)\n\t\t(*f_{n})++;")
            elif idx:
                post.append(f"if ((*ierr == MPI_SUCCESS || *ierr == MPI_ERR_IN_STATUS) &&\n"
                            f"\t    *f_{idx} != MPI_UNDEFINED)\n"
                            f"\t\tfor (int i_ = 0; i_ < *f_{idx}; i_++)\n\t\t\tf_{n}[i_]++;")
        elif p.ptr == 1 and kind and not p.array:
            fargs.append(f"MPI_Fint *f_{n}")
            init = f"f2c(STS_{kind.upper()}, *f_{n})" if f.inout == n else "0"
            pre.append(f"MPI_{kind} c_{n} = (MPI_{kind})(STS_HCAST){init};")
            cargs.append(f"&c_{n}")
            if f.inout == n:
                post.append(f"*f_{n} = F(STS_{kind.upper()}, c_{n});")
            else:
                post.append(f"if (*ierr == MPI_SUCCESS)\n\t\t*f_{n} = F(STS_{kind.upper()}, c_{n});")
        elif p.array and kind in ("Request", "Datatype"):
            cnt = count_for(f, i)
            if not cnt:
                return None
            fargs.append(f"MPI_Fint *f_{n}")
            allocs.append((f"MPI_{kind} *c_{n} = malloc((size_t)(*f_{cnt} > 0 ? *f_{cnt} : 1) * "
                           f"sizeof(*c_{n}));", f"c_{n}"))
            pre.append(f"for (int i_ = 0; i_ < *f_{cnt}; i_++)\n"
                       f"\t\tc_{n}[i_] = (MPI_{kind})(STS_HCAST)f2c(STS_{kind.upper()}, f_{n}[i_]);")
            cargs.append(f"c_{n}")
            if not p.const:
                post.append(f"for (int i_ = 0; i_ < *f_{cnt}; i_++)\n"
                            f"\t\tf_{n}[i_] = F(STS_{kind.upper()}, c_{n}[i_]);")
        elif p.base == "void" and p.ptr == 1:
            # a buffer may be a sentinel; any other memory (MPI_Pack's
            # outbuf) is the program's as it is
            fargs.append(f"void *f_{n}")
            cargs.append(f"buf(f_{n})" if n in BUFFERS or n == "location" else f"f_{n}")
        elif p.base == "MPI_Status" and p.ptr == 1:
            fargs.append(f"MPI_Fint *f_{n}")
            cargs.append(f"statuses(f_{n})" if p.array else f"status(f_{n})")
        elif p.base == "char" and p.ptr == 1 and not p.array and p.const:
            fargs.append(f"char *f_{n}")
            hidden.append(f"size_t f_{n}_len")
            allocs.append((f"char *c_{n} = fstr_in(f_{n}, f_{n}_len);", f"c_{n}"))
            cargs.append(f"c_{n}")
        elif p.base == "char" and p.ptr == 1 and not p.array:
            fargs.append(f"char *f_{n}")
            hidden.append(f"size_t f_{n}_len")
            pre.append(f"char c_{n}[FSTR_OUT] = \"\";")
            cargs.append(f"c_{n}")
            post.append(f"if (*ierr == MPI_SUCCESS)\n\t\tfstr_out(f_{n}, f_{n}_len, c_{n});")
        else:
            return None
    fargs.append("MPI_Fint *ierr")
    frees = [f"free({name});" for _, name in allocs]
    text = [f"void {low}_({', '.join(fargs + hidden)})", "{"]
    text += [f"\t{decl}" for decl, _ in allocs]
    if allocs:
        text.append(f"\n\tif ({' || '.join('!' + name for _, name in allocs)}) {{")
        text += [f"\t\t{line}" for line in frees]
        text += ["\t\t*ierr = MPI_ERR_NO_MEM;", "\t\treturn;", "\t}"]
    text += [f"\t{line}" for line in pre]
    text.append(f"\t*ierr = P{f.name}({', '.join(cargs)});")
    text += [f"\t{line}" for line in post + frees]
    text.append("}")
    return "\n".join(text)


if __name__ == "__main__":
    if len(HANDLE_KINDS) != len(PREDEF):
        raise SystemExit("gen_fortran.py: gen_wrappers.py's kinds changed")
    main()
