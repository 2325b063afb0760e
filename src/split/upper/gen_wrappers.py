#!/usr/bin/env python3
"""Generate the split process's MPI wrappers from functions.list (docs/split.md).

usage: gen_wrappers.py LIST OUTDIR

Writes into OUTDIR:
  sts_ops.h   struct sts_gen_ops: one pointer per generated function, in the
              neutral types of sts_mpi.h (the interface between the halves)
  uh_gen.c    upper half: every function of LIST with the ABI's own types
              (compiled once per ABI against that ABI's mpi.h); generated
              wrappers translate arguments and call through sts_lower_call;
              "no" functions name themselves and abort; PMPI_ aliases
  lh_gen.c    lower half: the generated functions on the real MPI (compiled
              once per MPI library), and sts_gen_ops_fill()
  predef.c    the predefined handles and error classes, by name, for either
              half (#ifdef each name: not every mpi.h has every one)
"""
import re
import sys

HANDLE_KINDS = ["Comm", "Datatype", "Op", "Group", "Request", "Errhandler", "Info", "Win",
                "File", "Message"]
KIND_ID = {k: i for i, k in enumerate(HANDLE_KINDS)}
BUFFERS = {"buf", "ibuf", "buffer", "sendbuf", "recvbuf", "inbuf", "inoutbuf", "origin_addr",
           "result_addr", "compare_addr"}
RANKS_IN = {"source", "dest", "root", "target_rank"}
RANKS_OUT = {"rank_source", "rank_dest"}
# int results whose values differ between the ABIs: (function, parameter) ->
# the translation (lh_<t>_out in the lower half, sts_<t>_out in the upper)
ENUMS_OUT = {("Topo_test", "status"): "topo", ("Error_class", "errorclass"): "err",
             ("Type_get_envelope", "combiner"): "combiner"}
# int arguments whose values differ between the ABIs: the same, the other
# way (sts_<t>_in in the upper half, lh_<t>_in in the lower)
ENUMS_IN = {("Error_class", "errorcode"): "err", ("Error_string", "errorcode"): "err",
            ("Comm_split_type", "split_type"): "splittype",
            ("Type_create_subarray", "order"): "order", ("Type_create_darray", "order"): "order",
            ("Type_match_size", "typeclass"): "typeclass", ("Win_lock", "lock_type"): "locktype"}
# int arrays whose values differ between the ABIs: (function, parameter) ->
# (the translation, as ENUMS_IN, of each value; the parameter that counts
# them): a translated copy is made in each half (sts_ints_in, lh_ints_in)
ENUM_ARRAYS_IN = {("Type_create_darray", "distrib_array"): ("distrib", "ndims"),
                  ("Type_create_darray", "darg_array"): ("darg", "ndims")}
# Functions whose handle out is the same real object on every call with the
# same arguments, never freed (MPI_Type_create_f90_*: predefined types,
# MPI-3.1 17.1.9): the neutral handle it already has is given again
# (lh_find), not a new one each call.
SHARED_RESULTS = {"Type_create_f90_real", "Type_create_f90_complex", "Type_create_f90_integer",
                  "Type_match_size"}
NEUTRAL_SCALARS = {"MPI_Aint": "sts_aint", "MPI_Offset": "sts_offset", "MPI_Count": "sts_count",
                   "MPI_Fint": "int"}

# Collectives: the blocking ones run in the lower half as their non-blocking
# form (MPI_I<name>) and a wait that a checkpoint can interrupt; every one,
# blocking or not, is counted on its communicator first (lh_coll.c).
COLLECTIVES = {"Barrier", "Bcast", "Reduce", "Allreduce", "Scan", "Exscan", "Gather", "Gatherv",
               "Scatter", "Scatterv", "Allgather", "Allgatherv", "Alltoall", "Alltoallv",
               "Reduce_scatter", "Reduce_scatter_block", "Alltoallw", "Neighbor_allgather",
               "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv",
               "Neighbor_alltoallw"}

# Collectives with no non-blocking form, which keep the thread inside the
# lower half until every member called them: they pass an entry barrier
# first, which parks (lh_coll_blocking), on their communicator or on the
# one the lower half made for the file (lh_io_blocking).
BLOCKING_ON_COMM = {"Comm_dup", "Comm_split", "Comm_split_type", "Comm_create", "Cart_create",
                    "Cart_sub", "Graph_create", "Dist_graph_create", "Dist_graph_create_adjacent",
                    "Comm_dup_with_info", "Intercomm_create", "Intercomm_merge"}
# (not MPI_Comm_create_group: collective over the group's members only, the
# others never call it; a checkpoint that finds a member inside it waiting
# for a stopped one fails, docs/split.md)

# A distributed graph's weights: MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY differ
# between the ABIs (2 and 3 in Open MPI's, addresses of variables in
# MPICH's): sts_weights_in in the upper half, lh_weights in the lower.
WEIGHTS = {"weights", "sourceweights", "destweights"}
BLOCKING_ON_FILE = {"File_set_size", "File_preallocate", "File_read_at_all", "File_write_at_all",
                    "File_read_all", "File_write_all", "File_sync", "File_read_ordered",
                    "File_write_ordered", "File_seek_shared", "File_set_info"}
# The non-blocking collectives on a file: counted on its communicator
# (lh_io_enter), completed in the drain like the others.
NONBLOCKING_ON_FILE = {"File_iread_all", "File_iwrite_all", "File_iread_at_all",
                       "File_iwrite_at_all"}

# Predefined handles, by kind; index = the neutral handle (0 = the null one).
PREDEF = {
    "Comm": ["MPI_COMM_NULL", "MPI_COMM_WORLD", "MPI_COMM_SELF"],
    "Group": ["MPI_GROUP_NULL", "MPI_GROUP_EMPTY"],
    "Datatype": """MPI_DATATYPE_NULL MPI_CHAR MPI_SIGNED_CHAR MPI_UNSIGNED_CHAR MPI_BYTE
        MPI_WCHAR MPI_SHORT MPI_UNSIGNED_SHORT MPI_INT MPI_UNSIGNED MPI_LONG MPI_UNSIGNED_LONG
        MPI_LONG_LONG_INT MPI_LONG_LONG MPI_UNSIGNED_LONG_LONG MPI_FLOAT MPI_DOUBLE
        MPI_LONG_DOUBLE MPI_PACKED MPI_INT8_T MPI_INT16_T MPI_INT32_T MPI_INT64_T MPI_UINT8_T
        MPI_UINT16_T MPI_UINT32_T MPI_UINT64_T MPI_C_BOOL MPI_C_FLOAT_COMPLEX MPI_C_COMPLEX
        MPI_C_DOUBLE_COMPLEX MPI_C_LONG_DOUBLE_COMPLEX MPI_AINT MPI_OFFSET MPI_COUNT
        MPI_FLOAT_INT MPI_DOUBLE_INT MPI_LONG_INT MPI_2INT MPI_SHORT_INT MPI_LONG_DOUBLE_INT
        MPI_CHARACTER MPI_LOGICAL MPI_INTEGER MPI_REAL MPI_DOUBLE_PRECISION MPI_COMPLEX
        MPI_DOUBLE_COMPLEX MPI_2REAL MPI_2DOUBLE_PRECISION MPI_2INTEGER MPI_INTEGER1
        MPI_INTEGER2 MPI_INTEGER4 MPI_INTEGER8 MPI_REAL4 MPI_REAL8 MPI_COMPLEX8
        MPI_COMPLEX16 MPI_CXX_BOOL MPI_CXX_FLOAT_COMPLEX MPI_CXX_DOUBLE_COMPLEX""".split(),
    "Op": """MPI_OP_NULL MPI_MAX MPI_MIN MPI_SUM MPI_PROD MPI_LAND MPI_BAND MPI_LOR MPI_BOR
        MPI_LXOR MPI_BXOR MPI_MAXLOC MPI_MINLOC MPI_REPLACE MPI_NO_OP""".split(),
    "Request": ["MPI_REQUEST_NULL"],
    "Errhandler": ["MPI_ERRHANDLER_NULL", "MPI_ERRORS_ARE_FATAL", "MPI_ERRORS_RETURN"],
    "Info": ["MPI_INFO_NULL", "MPI_INFO_ENV"],
    "Win": ["MPI_WIN_NULL"],
    "File": ["MPI_FILE_NULL"],
    "Message": ["MPI_MESSAGE_NULL", "MPI_MESSAGE_NO_PROC"],
}
# Error classes; index = the neutral class (0 = MPI_SUCCESS).
ERRORS = """MPI_SUCCESS MPI_ERR_BUFFER MPI_ERR_COUNT MPI_ERR_TYPE MPI_ERR_TAG MPI_ERR_COMM
    MPI_ERR_RANK MPI_ERR_REQUEST MPI_ERR_ROOT MPI_ERR_GROUP MPI_ERR_OP MPI_ERR_TOPOLOGY
    MPI_ERR_DIMS MPI_ERR_ARG MPI_ERR_UNKNOWN MPI_ERR_TRUNCATE MPI_ERR_OTHER MPI_ERR_INTERN
    MPI_ERR_IN_STATUS MPI_ERR_PENDING MPI_ERR_ACCESS MPI_ERR_AMODE MPI_ERR_ASSERT
    MPI_ERR_BAD_FILE MPI_ERR_BASE MPI_ERR_CONVERSION MPI_ERR_DISP MPI_ERR_DUP_DATAREP
    MPI_ERR_FILE_EXISTS MPI_ERR_FILE_IN_USE MPI_ERR_FILE MPI_ERR_INFO_KEY
    MPI_ERR_INFO_NOKEY MPI_ERR_INFO_VALUE MPI_ERR_INFO MPI_ERR_IO MPI_ERR_KEYVAL
    MPI_ERR_LOCKTYPE MPI_ERR_NAME MPI_ERR_NO_MEM MPI_ERR_NOT_SAME MPI_ERR_NO_SPACE
    MPI_ERR_NO_SUCH_FILE MPI_ERR_PORT MPI_ERR_QUOTA MPI_ERR_READ_ONLY MPI_ERR_RMA_CONFLICT
    MPI_ERR_RMA_SYNC MPI_ERR_SERVICE MPI_ERR_SIZE MPI_ERR_SPAWN MPI_ERR_UNSUPPORTED_DATAREP
    MPI_ERR_UNSUPPORTED_OPERATION MPI_ERR_WIN MPI_ERR_RMA_RANGE MPI_ERR_RMA_ATTACH
    MPI_ERR_RMA_SHARED MPI_ERR_RMA_FLAVOR""".split()


class Param:
    def __init__(self, text):
        text = text.strip()
        if text == "...":
            self.array, self.type, self.name, self.ptr, self.base, self.const = \
                False, "...", "", 0, "...", False
            self.suffix = ""
            return
        self.array = "[" in text
        self.suffix = "".join(re.findall(r"\[[^\]]*\]", text))
        text = re.sub(r"\[[^\]]*\]", "", text).strip()
        m = re.match(r"(.*?)([A-Za-z_][A-Za-z0-9_]*)$", text)
        self.type = m.group(1).replace(" *", "*").strip()
        self.name = m.group(2)
        self.ptr = self.type.count("*") + (1 if self.array else 0)
        self.base = self.type.replace("*", "").replace("const", "").strip()
        self.const = "const" in self.type

    def decl(self):
        """As in the ABI's prototype."""
        t = self.type
        if t == "...":
            return t
        if self.array:
            return f"{t} {self.name}{self.suffix}"
        return f"{t.replace('*', ' *')} {self.name}".replace("* ", "*").replace("  ", " ")

    def kind(self):
        b = self.base[4:] if self.base.startswith("MPI_") else None
        return b if b in KIND_ID else None


class Func:
    def __init__(self, status, proto):
        m = re.match(r"(.*?)\s*\b(MPI_[A-Za-z0-9_]+)\((.*)\)$", proto)
        if not m:
            raise SystemExit(f"cannot parse: {proto}")
        self.status = status.split(":")[0]
        self.inout = status.split("=", 1)[1] if "=" in status else None
        self.ret = m.group(1).strip()
        self.name = m.group(2)
        self.short = self.name[4:]
        args = m.group(3).strip()
        self.params = [] if args in ("", "void") else [Param(p) for p in args.split(",")]

    def proto(self, name=None):
        ps = ", ".join(p.decl() for p in self.params) or "void"
        return f"{self.ret} {name or self.name}({ps})"


def c_string(text):
    """text as the inside of a C string literal."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def read_list(path):
    funcs = []
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        status, proto = line.split(None, 1)
        proto, _, why = proto.partition(" -- ")   # a "no" function's reason
        f = Func(status, proto.strip())
        f.why = why.strip()
        if f.status == "no" and not f.why:
            raise SystemExit(f"{f.name}: a 'no' function needs its reason after ' -- '")
        funcs.append(f)
    return funcs


def neutral(f, p):
    """The neutral C type of a parameter of a generated function."""
    k = p.kind()
    if k and p.ptr == 0:
        return "uint32_t"
    if k and p.ptr == 1 and not p.array:
        return "uint32_t *"
    if k and f.status == "both" and p.array and not p.const:
        return "uint32_t *"   # handles out, translated by the hand-written sides
    if k == "Datatype" and p.array and p.const and comm_param(f):
        return "const uint32_t *"   # one per peer of a collective: type_array()
    if k:
        raise SystemExit(f"{f.name}: handle array {p.name} needs a hand-written wrapper")
    if p.base == "MPI_Status" and f.status == "both" and p.ptr == 1 and not p.array:
        return ("const " if p.const else "") + "struct sts_status *"
    if p.base == "MPI_Status":
        if p.array or p.ptr != 1 or p.const:
            raise SystemExit(f"{f.name}: status array {p.name} needs a hand-written wrapper")
        return "struct sts_status *"
    t = p.type
    for a, b in NEUTRAL_SCALARS.items():
        t = re.sub(rf"\b{a}\b", b, t)
    if "MPI_" in t:
        raise SystemExit(f"{f.name}: parameter {p.name} of type {p.type} needs a hand-written wrapper")
    if p.array and p.suffix == "[][3]":
        return "int *"   # MPI_Group_range_incl's ranges: int (*)[3] in each half
    if p.array and p.suffix != "[]":
        raise SystemExit(f"{f.name}: parameter {p.name}{p.suffix} needs a hand-written wrapper")
    if p.array:
        t += "*"
    return t.replace("*", " *").replace("  ", " ")


def comm_param(f):
    """The name of f's communicator argument (not one it makes), None if none."""
    return next((p.name for p in f.params if p.kind() == "Comm" and p.ptr == 0), None)


def type_array(f, p):
    """The arguments of sts_coll_peers/lh_coll_peers counting a collective's
    datatypes of array p (MPI_Alltoallw's: one per member of the group, or
    of the remote group; the neighbourhood ones': one per out-neighbour
    for those sent, per in-neighbour for those received)."""
    return f'{1 if "eighbor" in f.short else 0}, {1 if p.name.startswith("send") else 0}'


def ops_header(funcs):
    out = ["/* Generated by gen_wrappers.py from functions.list: do not edit. */",
           "#ifndef STS_OPS_H", "#define STS_OPS_H", "#include <stdint.h>", "",
           "typedef long sts_aint;          /* MPI_Aint in both ABIs of x86-64 */",
           "typedef long long sts_offset;   /* MPI_Offset */",
           "typedef long long sts_count;    /* MPI_Count */", "",
           "struct sts_status;", "", "struct sts_gen_ops {"]
    for f in funcs:
        if f.status in ("gen", "lower", "upper", "both"):
            ps = ", ".join(neutral(f, p) + " " + p.name for p in f.params) or "void"
            out.append(f"\tint (*{f.short})({ps});")
    out += ["};", "", "#endif", ""]
    return "\n".join(out)


def handle_arg(f, kind, inout=True):
    """The argument index of f's first handle of kind it is called on (not
    one it makes), None if none."""
    for i, p in enumerate(f.params):
        if p.kind() == kind and (p.ptr == 0 or (inout and f.inout == p.name)):
            return i
    return None


def raise_on(f):
    """The upper half's return: the error raised on the handler of the
    call's communicator or file (uh_err.c)."""
    if f.short in ("File_open", "File_delete"):   # MPI-3.1 13.7: MPI_FILE_NULL's
        return f'sts_err_file(ret, 0, "{f.name}")'
    i = handle_arg(f, "Comm")
    if i is not None:
        return f'sts_err_comm(ret, a{i}, "{f.name}")'
    i = handle_arg(f, "File")
    if i is not None:
        return f'sts_err_file(ret, a{i}, "{f.name}")'
    if handle_arg(f, "Request") is not None:   # Wait, Test, ...: the request's
        return f'sts_err_req(ret, "{f.name}")'
    return f'sts_err_world(ret, "{f.name}")'


def raised_on_object(f):
    """The lower half's expression of the object whose error handler an
    error of a request f makes is raised on: its communicator, or
    STS_ERRH_FILE | its file (None: MPI_COMM_WORLD's)."""
    i = handle_arg(f, "Comm")
    if i is not None:
        return f.params[i].name
    i = handle_arg(f, "File")
    if i is not None:
        return f"STS_ERRH_FILE | {f.params[i].name}"
    return None


def made_objects(f):
    """After a call that made a communicator or opened a file: its error
    handler (the parent communicator's, MPI_FILE_NULL's)."""
    for i, p in enumerate(f.params):
        if p.ptr == 1 and not p.array and f.inout != p.name:
            if p.kind() == "Comm":
                parent = handle_arg(f, "Comm", inout=False)
                return f"\tsts_comm_made({'a%d' % parent if parent is not None else 0}, a{i});"
            if p.kind() == "File":
                return f"\tsts_file_made(a{i});"
    return None


# the functions each half translates buffers and weights with (its prefix
# names the others: sts_rank_in, lh_topo_out...)
UPPER_IN = {"prefix": "sts", "buf": "sts_buf_in", "weights": "sts_weights_in"}
LOWER_IN = {"prefix": "lh", "buf": "lh_buf", "weights": "lh_weights"}


def translated(f, p, tmp, side, pre, args, post, nomem):
    """When both halves translate p alike, each with its own functions
    (side: UPPER_IN or LOWER_IN), append its argument and what it needs
    before and after the call (an array of enums: a copy named tmp) and
    say True; else False."""
    x, pfx, key = p.name, side["prefix"], (f.short, p.name)
    if x in BUFFERS and p.ptr == 1:
        args.append(f"{side['buf']}({x})")
    elif x in WEIGHTS and p.ptr == 1:
        args.append(f"{side['weights']}({x})")
    elif x in RANKS_IN and p.ptr == 0:
        args.append(f"{pfx}_rank_in({x})")
    elif x in RANKS_OUT and p.ptr == 1:
        args.append(x)
        post.append(f"\t*{x} = {pfx}_rank_out(*{x});")
    elif key in ENUMS_OUT:
        args.append(x)
        post.append(f"\t*{x} = {pfx}_{ENUMS_OUT[key]}_out(*{x});")
    elif key in ENUMS_IN:
        args.append(f"{pfx}_{ENUMS_IN[key]}_in({x})")
    elif key in ENUM_ARRAYS_IN:
        tr, n = ENUM_ARRAYS_IN[key]
        pre.append(f"\tint *{tmp} = {pfx}_ints_in({x}, {n}, {pfx}_{tr}_in);")
        nomem.append(tmp)
        args.append(tmp)
    else:
        return False
    return True


def upper(funcs):
    out = ["/* Generated by gen_wrappers.py from functions.list: do not edit.",
           " * The upper half's MPI functions, with the ABI's types (docs/split.md). */",
           "#include <stdlib.h>", "", '#include "uh.h"', ""]
    for f in funcs:
        out.append(f"#undef {f.name}\n#undef P{f.name}")
    out.append("")
    for f in funcs:
        if f.status in ("hand", "both"):
            continue
        # upper: the translation is generated as sts_gen_<name>, which a
        # hand-written PMPI_<name> calls (uh_attr.c: attributes copied by
        # Comm_dup, deleted by Comm_free)
        ext = f.status == "upper"
        out.append(f"{f.proto('sts_gen_' + f.short if ext else 'P' + f.name)}\n{{")
        if f.status == "no":
            for p in f.params:
                out.append(f"\t(void){p.name};")
            out.append(f'\tsts_unsupported_why("{f.name}", "{c_string(f.why)}");')
            if f.ret != "void":
                out.append(f"\treturn ({f.ret})0;")
            out.append("}")
        else:
            pre, args, post, nomem = [], [], [], []
            for i, p in enumerate(f.params):
                k = p.kind()
                if k == "Datatype" and p.array:
                    pre.append(f"\tuint32_t *a{i} = sts_types_in({p.name}, "
                               f"sts_coll_peers({comm_param(f)}, {type_array(f, p)}));")
                    nomem.append(f"a{i}")
                    args.append(f"a{i}")
                elif k and p.ptr == 0:
                    pre.append(f"\tuint32_t a{i} = sts_in(STS_{k.upper()}, STS_HVAL({p.name}));")
                    args.append(f"a{i}")
                elif k:
                    if f.inout == p.name:
                        pre.append(f"\tuint32_t a{i} = sts_in(STS_{k.upper()}, STS_HVAL(*{p.name}));")
                    else:
                        pre.append(f"\tuint32_t a{i} = 0;")
                    args.append(f"&a{i}")
                    post.append(f"\t*{p.name} = ({p.base})(STS_HCAST)sts_out(STS_{k.upper()}, a{i});")
                elif p.base == "MPI_Status":
                    pre.append(f"\tstruct sts_status a{i};")
                    args.append(f"STS_STATUS_IGNORED({p.name}) ? NULL : &a{i}")
                    post.append(f"\tif (!STS_STATUS_IGNORED({p.name}))\n"
                                f"\t\tsts_status_out(&a{i}, {p.name});")
                elif p.suffix == "[][3]":
                    args.append(f"(int *){p.name}")
                elif translated(f, p, f"a{i}", UPPER_IN, pre, args, post, nomem):
                    pass
                elif p.ptr and any(n in p.type for n in NEUTRAL_SCALARS):
                    args.append(f"({neutral(f, p)}){p.name}")   # same size, other C type
                else:
                    args.append(p.name)
            made = made_objects(f)
            if made:
                post.append(made)
            out += pre
            if nomem:
                out.append(f"\tif ({' || '.join('!' + a for a in nomem)}) {{")
                out += [f"\t\tfree({a});" for a in nomem]
                out.append(f'\t\treturn sts_fail(MPI_ERR_NO_MEM, 1, "{f.name}");\n\t}}')
            # STS_AGAIN: a checkpoint began while the call waited; the thread
            # parked on its way out (sts_leave) and the call goes on now
            out.append(f"\tint ret;\n\n\tdo\n\t\tSTS_LOWER(ret = sts_lh->gen.{f.short}({', '.join(args)}));"
                       "\n\twhile (ret == STS_AGAIN);")
            if post:
                out.append("\tif (ret == 0) {" if any("*" in x for x in post) else "\t{")
                out += ["\t" + x.replace("\n", "\n\t") for x in post]
                out.append("\t}")
            out += [f"\tfree({a});" for a in nomem]
            out.append(f"\treturn {raise_on(f)};\n}}")
        if ext:
            out.append("")
            continue
        out.append(f"{f.proto()} __attribute__((weak, alias(\"P{f.name}\")));\n")
    return "\n".join(out)


def lower(funcs):
    out = ["/* Generated by gen_wrappers.py from functions.list: do not edit.",
           " * The lower half's side of each generated function, on the real MPI. */",
           "#include <stdlib.h>", "", '#include "lh.h"', '#include "lh_ledger.h"', ""]
    names = []
    for f in funcs:
        if f.status in ("lower", "both"):
            names.append(f.short)
            ps = ", ".join(neutral(f, p) + " " + p.name for p in f.params) or "void"
            out.append(f"int lh_{f.short}({ps});   /* written by hand */\n")
            continue
        if f.status not in ("gen", "upper"):
            continue
        names.append(f.short)
        ps = ", ".join(neutral(f, p) + " " + p.name for p in f.params) or "void"
        out.append(f"static int lh_{f.short}({ps})\n{{")
        pre, args, post, nomem, kept = [], [], [], [], []
        for i, p in enumerate(f.params):
            k = p.kind()
            if k == "Datatype" and p.array:
                # kept until the request is freed: the MPI may read them until
                # the collective completes (lh_keep)
                comm = comm_param(f)
                kept.append((f"t{i}", f"\tMPI_Datatype *t{i} = lh_types_in({p.name}, lh_coll_peers("
                             f"(MPI_Comm)(LH_HCAST)lh_real(STS_COMM, {comm}), {type_array(f, p)}));"))
                args.append(f"t{i}")
            elif k and p.ptr == 0:
                args.append(f"({p.base})(LH_HCAST)lh_real(STS_{k.upper()}, {p.name})")
            elif k:
                init = (f"({p.base})(LH_HCAST)lh_real(STS_{k.upper()}, *{p.name})"
                        if f.inout == p.name else f"({p.base})(LH_HCAST)lh_real(STS_{k.upper()}, 0)")
                pre.append(f"\t{p.base} r{i} = {init};")
                args.append(f"&r{i}")
                if f.inout == p.name:
                    post.append(f"\t*{p.name} = lh_update(STS_{k.upper()}, *{p.name}, LH_HVAL(r{i}));")
                elif f.short in SHARED_RESULTS:
                    post.append(f"\tuint32_t n{i} = lh_find(STS_{k.upper()}, LH_HVAL(r{i}));\n"
                                f"\t*{p.name} = n{i} != UINT32_MAX ? n{i} : "
                                f"lh_new(STS_{k.upper()}, LH_HVAL(r{i}));")
                else:
                    post.append(f"\t*{p.name} = lh_new(STS_{k.upper()}, LH_HVAL(r{i}));")
                    on = raised_on_object(f)
                    if k == "Request" and on:
                        post.append(f"\tlh_req_raises_on(*{p.name}, {on});")
            elif p.base == "MPI_Status":
                pre.append(f"\tMPI_Status r{i} = {{ 0 }};")
                args.append(f"{p.name} ? &r{i} : MPI_STATUS_IGNORE")
                post.append(f"\tif ({p.name})\n\t\tlh_status_out(&r{i}, {p.name});")
            elif p.suffix == "[][3]":
                args.append(f"(int (*)[3]){p.name}")
            elif translated(f, p, f"t{i}", LOWER_IN, pre, args, post, nomem):
                pass
            elif p.ptr and any(n in p.type for n in NEUTRAL_SCALARS):
                args.append(f"({p.type}{'*' if p.array else ''}){p.name}")   # same size
            else:
                args.append(p.name)
        op = next((p.name for p in f.params if p.kind() == "Op" and p.ptr == 0), None)
        req = next((p.name for p in f.params if p.kind() == "Request" and p.ptr == 1), None)
        if op and req:
            # the request may call the operation after the program freed it
            post.append(f"\tlh_op_hold({op}, *{req});")
        out += pre
        comm = next((p.name for p in f.params if p.kind() == "Comm" and p.ptr == 0), None)
        if f.short in COLLECTIVES:
            # the key tells this call from another when it goes on after STS_AGAIN
            key = " ^ ".join(f"((uint64_t)(uintptr_t){p.name} << {i % 48})" for i, p in enumerate(f.params))
            out.append(f"\tuint64_t key = {key};\n\tuint32_t req = 0;\n\tMPI_Request r;\n"
                       f"\tint ret = lh_coll_begin({comm}, key, &req);\n\n"
                       "\tif (ret == STS_AGAIN)\n\t\treturn ret;\n\tif (ret == 0) {\n"
                       + "".join("\t" + line + "\n" for _, line in kept) +
                       (f"\t\tif ({' || '.join('!' + t for t, _ in kept)}) {{\n"
                        + "".join(f"\t\t\tfree({t});\n" for t, _ in kept) +
                        "\t\t\treturn lh_err(MPI_ERR_NO_MEM);\n\t\t}\n" if kept else "") +
                       f"\t\tret = MPI_I{f.short.lower()}({', '.join(args + ['&r'])});\n"
                       + "".join(f"\t\tif (ret != MPI_SUCCESS)\n\t\t\tfree({t});\n" for t, _ in kept) +
                       "\t\tif (ret != MPI_SUCCESS)\n\t\t\treturn lh_err(ret);\n"
                       "\t\treq = lh_coll_started(r);\n"
                       + "".join(f"\t\tlh_keep(req, {t});\n" for t, _ in kept) +
                       "\t}\n\treturn lh_coll_wait(key, &req);\n}\n")
            continue
        if f.short[0] == "I" and f.short[1:].capitalize() in COLLECTIVES:
            out.append(f"\tint held = lh_coll_enter({comm});\n\n\tif (held)\n\t\treturn held;")
        elif f.short in NONBLOCKING_ON_FILE:
            out.append("\tint held = lh_io_enter(fh);\n\n\tif (held)\n\t\treturn held;")
        elif f.short in BLOCKING_ON_COMM | BLOCKING_ON_FILE:
            fh = next((p.name for p in f.params if p.kind() == "File" and p.ptr == 0), None)
            on = f"lh_coll_blocking({comm})" if f.short in BLOCKING_ON_COMM else f"lh_io_blocking({fh})"
            out.append(f"\tint held = {on};\n\n\tif (held)\n\t\treturn held;")
        out += [line for _, line in kept]
        nomem += [t for t, _ in kept]
        if nomem:
            out.append(f"\tif ({' || '.join('!' + a for a in nomem)}) {{")
            out += [f"\t\tfree({a});" for a in nomem]
            out.append("\t\treturn lh_err(MPI_ERR_NO_MEM);\n\t}")
        if f.short in BLOCKING_ON_COMM | BLOCKING_ON_FILE:
            # the arguments read under the lower half's lock, the call
            # without it: it waits for the other members, one of which may
            # be another thread of this rank (lh_lock_out)
            out += [f"\t__typeof__({a}) b{j} = {a};" for j, a in enumerate(args)]
            out.append("\tunsigned depth = lh_lock_out();")
            out.append(f"\tint ret = {f.name}({', '.join(f'b{j}' for j in range(len(args)))});")
            out.append("\tlh_lock_back(depth);\n")
        elif f.short == "Comm_free":
            # its farewell may keep the real one until every member freed it
            # (lh_coll.c)
            out.append(f"\tint ret = lh_coll_comm_freeing(*comm, &r0) ? MPI_SUCCESS : "
                       f"{f.name}(&r0);\n")
        else:
            out.append(f"\tint ret = {f.name}({', '.join(args)});\n")
        req = next((p.name for p in f.params if p.kind() == "Request" and p.ptr == 1), None)
        for t, _ in kept:   # a non-blocking one keeps them with its request
            post.append(f"\tlh_keep(*{req}, {t});")
            nomem.remove(t)
            out.append(f"\tif (ret != MPI_SUCCESS)\n\t\tfree({t});")
        out += [f"\tfree({a});" for a in nomem]
        if post:
            out.append("\tif (ret == MPI_SUCCESS) {")
            out += ["\t" + x.replace("\n", "\n\t") for x in post]
            out.append("\t}")
        out.append("\treturn lh_err(ret);\n}\n")
    out.append("void sts_gen_ops_fill(struct sts_gen_ops *ops)\n{")
    out += [f"\tops->{n} = lh_{n};" for n in names]
    out.append("}\n")
    return "\n".join(out)


def predef():
    out = ["/* Generated by gen_wrappers.py: do not edit. The predefined handles of",
           " * every kind and the error classes as the mpi.h in use spells them;",
           " * included by the upper half's ABI layer and by the lower half. */",
           "#ifndef STS_PREDEF_VALUE", "#error define STS_PREDEF_VALUE(name) first", "#endif", ""]
    for k in HANDLE_KINDS:
        names = PREDEF[k]
        out.append(f"static const struct sts_predef sts_predef_{k.lower()}[] = {{")
        for i, n in enumerate(names):
            out.append(f"#ifdef {n}\n\t{{ {i}, \"{n}\", STS_PREDEF_VALUE({n}) }},\n#endif")
        out.append("};\n")
    out.append("static const struct sts_predef sts_predef_error[] = {")
    for i, n in enumerate(ERRORS):
        out.append(f"#ifdef {n}\n\t{{ {i}, \"{n}\", (uint64_t)({n}) }},\n#endif")
    out.append("};\n")
    out.append("static const struct sts_predef_kind sts_predef_kinds[STS_KINDS] = {")
    for k in HANDLE_KINDS:
        out.append(f"\t{{ sts_predef_{k.lower()}, sizeof(sts_predef_{k.lower()}) / "
                   f"sizeof(struct sts_predef), {len(PREDEF[k])} }},")
    out.append("};\n")
    return "\n".join(out)


def kinds_header():
    out = ["/* Generated by gen_wrappers.py: do not edit. */", "#ifndef STS_KINDS_H",
           "#define STS_KINDS_H", "enum sts_kind {"]
    out += [f"\tSTS_{k.upper()} = {i}," for i, k in enumerate(HANDLE_KINDS)]
    out += ["\tSTS_KINDS", "};", f"#define STS_NERRORS {len(ERRORS)}",
            "#define STS_KIND_NAMES { " + ", ".join(f'"{k}"' for k in HANDLE_KINDS) + " }",
            "#endif", ""]
    return "\n".join(out)


def write_if_changed(path, text):
    """Write path only when its text changes (the build then recompiles
    only what depends on a file that did)."""
    try:
        if open(path).read() == text:
            return
    except OSError:
        pass
    with open(path, "w") as fh:
        fh.write(text)


def main():
    funcs = read_list(sys.argv[1])
    outdir = sys.argv[2]
    files = {"sts_ops.h": ops_header(funcs), "uh_gen.c": upper(funcs), "lh_gen.c": lower(funcs),
             "predef.c": predef(), "sts_kinds.h": kinds_header()}
    for name, text in files.items():
        write_if_changed(f"{outdir}/{name}", text)


if __name__ == "__main__":
    main()
