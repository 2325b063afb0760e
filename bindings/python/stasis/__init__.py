"""stasis - the Python binding of libstasis (include/stasis.h), over ctypes.

Protect numpy arrays, checkpoint them, and get them back after a crash:

    from mpi4py import MPI
    import numpy as np
    import stasis

    stasis.init(MPI.COMM_WORLD)          # or stasis.init() without MPI
    step = np.zeros(1, dtype=np.int64)
    grid = np.zeros((64, 64))
    stasis.protect(0, step)
    stasis.protect(1, grid)
    if stasis.status() == stasis.RESTARTED:
        stasis.recover()                 # writes into step and grid in place
    while step[0] < steps:
        ...
        step[0] += 1
        if step[0] % 100 == 0:
            stasis.checkpoint(stasis.LEVEL_AUTO)
    stasis.finalize()

Failures raise StasisError (an OSError: errno is the error, strerror the
library's message). The library is loaded by init(): libstasis (Open MPI)
when a communicator is given, libstasis_serial otherwise; see _library()
for where it is looked for, and docs/bindings.md for the limits.
"""
import ctypes
import errno
import ctypes.util
import os
import pathlib

__all__ = [
    "StasisError", "init", "type_create", "protect", "unprotect", "status", "recover",
    "recover_var", "checkpoint", "checkpoint_wait", "need_checkpoint", "protect_distributed",
    "start_output", "route_file", "complete_output", "start_restart", "complete_restart", "should_exit", "finalize", "strerror",
    "library_path",
    "OK", "FRESH", "RESTARTED", "LEVEL_AUTO", "LEVEL_SINGLE", "LEVEL_PARTNER", "LEVEL_RS",
    "LEVEL_GLOBAL", "BYTE", "INT", "LONG", "FLOAT", "DOUBLE",
]

# The constants of stasis.h, without the STASIS_ prefix.
OK = 0
FRESH = 0
RESTARTED = 1
LEVEL_AUTO = 0
LEVEL_SINGLE = 1
LEVEL_PARTNER = 2
LEVEL_RS = 3
LEVEL_GLOBAL = 4
BYTE = 1
INT = 2
LONG = 3
FLOAT = 4
DOUBLE = 5

_EINVAL = 22
_ENOSYS = 38

# Where this file sits in the source tree: bindings/python/stasis/.
_REPO = pathlib.Path(__file__).resolve().parents[3]

_lib = None            # the loaded library (one per process)
_lib_path = None
_protected = {}        # id -> the array, so its buffer outlives the protection
_types = {}            # element size -> a type from stasis_type_create


class StasisError(OSError):
    """A libstasis call failed: errno is the (positive) errno, strerror the
    library's one-line message, code the negative return value."""

    def __init__(self, code, message):
        super().__init__(-code, message)
        self.code = code


def _library(mpi):
    """The path of the library to load: $STASIS_LIBRARY; else the build tree
    this package sits in (build/src/api/); else the system's (find_library)."""
    name = "stasis" if mpi else "stasis_serial"
    env = os.environ.get("STASIS_LIBRARY")
    if env:
        return env
    built = _REPO / "build" / "src" / "api" / f"lib{name}.so"
    if built.exists():
        return str(built)
    found = ctypes.util.find_library(name)
    if found:
        return found
    raise StasisError(-2, f"stasis: lib{name}.so not found: set STASIS_LIBRARY to its path "
                          f"(looked in {built.parent} and the system's library path)")


def _declare(lib):
    c_int, c_size_t, c_void_p, c_char_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, \
        ctypes.c_char_p
    table = {
        "stasis_init_serial": [c_char_p],
        "stasis_type_create": [c_size_t],
        "stasis_protect": [c_int, c_void_p, c_size_t, c_int],
        "stasis_protect_distributed": [c_int, c_void_p, c_size_t, c_int, c_size_t, c_size_t],
        "stasis_start_output": [c_char_p],
        "stasis_route_file": [c_char_p, c_char_p, c_size_t],
        "stasis_complete_output": [c_int],
        "stasis_start_restart": [c_char_p, c_size_t],
        "stasis_complete_restart": [c_int],
        "stasis_unprotect": [c_int],
        "stasis_status": [],
        "stasis_recover": [],
        "stasis_recover_var": [c_int],
        "stasis_checkpoint_valid": [c_int, c_int],
        "stasis_checkpoint_wait": [],
        "stasis_need_checkpoint": [ctypes.POINTER(c_int)],
        "stasis_should_exit": [ctypes.POINTER(c_int)],
        "stasis_finalize": [],
    }
    for fn, args in table.items():
        f = getattr(lib, fn)
        f.argtypes = args
        f.restype = c_int
    lib.stasis_strerror.argtypes = [c_int]
    lib.stasis_strerror.restype = c_char_p
    if hasattr(lib, "stasis_init_fortran"):
        lib.stasis_init_fortran.argtypes = [c_int, c_char_p]
        lib.stasis_init_fortran.restype = c_int


def _load(mpi):
    global _lib, _lib_path
    path = _library(mpi)
    if _lib is not None:
        if os.path.realpath(path) != os.path.realpath(_lib_path):
            raise StasisError(-_EINVAL, f"stasis: {_lib_path} is already loaded; one process "
                                        f"cannot also use {path}")
        return _lib
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise StasisError(-2, f"stasis: cannot load {path}: {e}") from None
    _declare(lib)
    _lib, _lib_path = lib, path
    return lib


def library_path():
    """The path of the loaded library, or None before init()."""
    return _lib_path


def strerror(code):
    """The message for code: this thread's last failure, or the generic one."""
    if _lib is None:
        return os.strerror(-code) if code < 0 else "not an error code"
    return _lib.stasis_strerror(code).decode(errors="replace")


def _check(ret):
    if ret < 0:
        raise StasisError(ret, strerror(ret))
    return ret


def _loaded():
    if _lib is None:
        raise StasisError(-_EINVAL, "stasis: call stasis.init() first")
    return _lib


def init(comm=None, config=None):
    """Collective over comm, an mpi4py communicator (MPI must be initialized:
    import mpi4py.MPI first); without comm, one process without MPI.
    config: a configuration file, or None for the defaults, /etc/stasis/
    stasis.conf and STASIS_* environment variables."""
    cfg = None if config is None else os.fsencode(config)
    if comm is None:
        lib = _load(mpi=False)
        return _check(lib.stasis_init_serial(cfg))
    lib = _load(mpi=True)
    if not hasattr(lib, "stasis_init_fortran"):
        raise StasisError(-_ENOSYS, f"stasis: {_lib_path} has no MPI (stasis_init_fortran); "
                                    "point STASIS_LIBRARY at the MPI build of libstasis")
    try:
        fcomm = comm.py2f()
    except AttributeError:
        raise TypeError(f"stasis.init: comm must be an mpi4py communicator, "
                        f"not {type(comm).__name__}") from None
    return _check(lib.stasis_init_fortran(fcomm, cfg))


def type_create(size):
    """A type of elements of `size` bytes (for protect's dtypes it has no
    native type for, chosen automatically)."""
    return _check(_loaded().stasis_type_create(size))


def _element_type(dtype):
    size = dtype.itemsize
    if dtype.kind in "iu" and size == ctypes.sizeof(ctypes.c_int):
        return INT
    if dtype.kind in "iu" and size == ctypes.sizeof(ctypes.c_long):
        return LONG
    if dtype.kind == "f" and size == 4:
        return FLOAT
    if dtype.kind == "f" and size == 8:
        return DOUBLE
    if size == 1:
        return BYTE
    if size not in _types:
        _types[size] = type_create(size)
    return _types[size]


def protect(id, array):
    """Protect a numpy array under id (>= 0): any dtype, any shape, but
    contiguous (C or Fortran order) and writeable, since recover() writes
    into it in place. The array is kept alive until unprotect(id) or
    finalize(); protecting id again with another array (a resized one)
    replaces it, with the same element size."""
    ptr, etype = _checked(id, array, "protect")
    _check(_loaded().stasis_protect(id, ptr, array.size, etype))
    _protected[id] = array


def protect_distributed(id, array, global_count, offset):
    """Like protect(), for this rank's part of a distributed array of
    global_count elements (counted in array.dtype) starting at element
    offset: a job with another number of ranks can recover it from a
    checkpoint in the global tier, each rank its own part."""
    ptr, etype = _checked(id, array, "protect_distributed")
    _check(_loaded().stasis_protect_distributed(id, ptr, array.size, etype, int(global_count),
                                                int(offset)))
    _protected[id] = array


def _checked(id, array, fn):
    """The pointer and element type of an array protect() can take."""
    import numpy as np

    if not isinstance(array, np.ndarray):
        raise TypeError(f"stasis.{fn}: id {id}: a numpy array is needed, "
                        f"not {type(array).__name__}")
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        raise ValueError(f"stasis.{fn}: id {id}: the array is not contiguous (a strided "
                         f"view, shape {array.shape}, strides {array.strides}); protect the "
                         f"array it views, or a contiguous copy you keep using")
    if not array.flags.writeable:
        raise ValueError(f"stasis.{fn}: id {id}: the array is read-only; recover() "
                         f"could not write into it")
    if array.dtype.hasobject:
        raise TypeError(f"stasis.{fn}: id {id}: dtype {array.dtype} holds Python "
                        f"objects, not data")
    return (array.ctypes.data if array.size else None), _element_type(array.dtype)


def unprotect(id):
    _check(_loaded().stasis_unprotect(id))
    _protected.pop(id, None)


def status():
    """FRESH, or RESTARTED when an established checkpoint of this job exists."""
    return _check(_loaded().stasis_status())


def recover():
    """Collective: restore every protected array from the latest established
    checkpoint (the arrays must have their checkpointed sizes)."""
    _check(_loaded().stasis_recover())


def recover_var(id):
    _check(_loaded().stasis_recover_var(id))


def checkpoint(level=LEVEL_AUTO, valid=True):
    """Collective: a checkpoint of every protected array at level. valid=False
    on any rank makes the whole checkpoint FAILED."""
    _check(_loaded().stasis_checkpoint_valid(level, 1 if valid else 0))


def start_output(name):
    """Collective: begin an output set of files the code writes itself (the
    SCR model); route_file() says where to write each."""
    _check(_loaded().stasis_start_output(name.encode()))


def route_file(path):
    """Where to write path (during an output set) or read it (during a
    restart): a path in Stasis's storage. A damaged file is refused."""
    buf = ctypes.create_string_buffer(4096)
    _check(_loaded().stasis_route_file(str(path).encode(), buf, len(buf)))
    return buf.value.decode()


def complete_output(valid=True):
    """Collective: commit the output set; valid=False on any rank fails it."""
    _check(_loaded().stasis_complete_output(1 if valid else 0))


def start_restart():
    """Collective: the name of the newest complete output set, now open for
    route_file(); None if there is none."""
    buf = ctypes.create_string_buffer(256)
    ret = _loaded().stasis_start_restart(buf, len(buf))
    if ret == -errno.ENOENT:
        return None
    _check(ret)
    return buf.value.decode()


def complete_restart(valid=True):
    """Collective: done reading; valid=False makes the next start_restart()
    try an older set."""
    _check(_loaded().stasis_complete_restart(1 if valid else 0))


def checkpoint_wait():
    """Wait until every checkpoint this rank took has all the copies its
    level promises (they follow checkpoint() in the background); raises
    StasisError naming what failed. Not collective."""
    _check(_loaded().stasis_checkpoint_wait())


def need_checkpoint():
    """Collective: True when a checkpoint is due (Young/Daly)."""
    flag = ctypes.c_int(0)
    _check(_loaded().stasis_need_checkpoint(ctypes.byref(flag)))
    return bool(flag.value)


def should_exit():
    """Collective: True when the job should checkpoint and end."""
    flag = ctypes.c_int(0)
    _check(_loaded().stasis_should_exit(ctypes.byref(flag)))
    return bool(flag.value)


def finalize():
    """Release everything (call it before MPI is finalized: mpi4py does that
    at exit). The protected arrays are released too."""
    try:
        _check(_loaded().stasis_finalize())
    finally:
        _protected.clear()
        _types.clear()
