/* uh_err.c - error handlers, kept entirely in the upper half
 * (docs/split.md, "Errors").
 *
 * The lower half runs every communicator of the real MPI with
 * MPI_ERRORS_RETURN (files have it by default), so an error comes back
 * from the lower half as a neutral error class. The wrapper of the call
 * then raises it here on the error handler of the call's communicator or
 * file (MPI_COMM_WORLD's for a call on neither, MPI_FILE_NULL's for
 * MPI_File_open and MPI_File_delete): MPI_ERRORS_RETURN returns it,
 * MPI_ERRORS_ARE_FATAL prints one line and aborts the job, and a handler
 * the program made is called here, with the program's own handle and
 * error code. The real MPI never sees a program's handler, so none needs
 * a trampoline, and the tables below are saved with the upper half's
 * memory: a restart under either MPI finds every handler where it was.
 *
 * Neutral errhandler numbers: 0 MPI_ERRHANDLER_NULL, 1
 * MPI_ERRORS_ARE_FATAL, 2 MPI_ERRORS_RETURN (gen_wrappers.py's PREDEF),
 * from STS_FIRST_USER the program's, never reused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "uh.h"

enum { EH_NULL, EH_FATAL, EH_RETURN };

struct handler {
	int kind;               /* STS_COMM or STS_FILE: what it may be set on */
	void (*fn)(void);       /* the program's function */
	sts_errh_caller *call;  /* how to call it if not as C (Fortran); NULL: C */
};

static struct handler *handlers;
static uint32_t nhandlers, handlers_cap;

/* The handler of each communicator and file, by neutral number; 0 (never
 * set) is the default: MPI_ERRORS_ARE_FATAL for a communicator (that of
 * MPI_COMM_WORLD, which every other inherits unless changed),
 * MPI_ERRORS_RETURN for a file. */
struct table {
	uint32_t *eh;
	uint32_t cap;
};
static struct table comms, files;
static uint32_t file_default = EH_RETURN;   /* MPI_FILE_NULL's */

static uint32_t *slot(struct table *t, uint32_t n)
{
	if (n >= t->cap) {
		uint32_t cap = t->cap ? t->cap : 64;
		uint32_t *eh;

		while (cap <= n)
			cap *= 2;
		eh = realloc(t->eh, cap * sizeof(*eh));
		if (!eh)
			return NULL;
		memset(eh + t->cap, 0, (cap - t->cap) * sizeof(*eh));
		t->eh = eh;
		t->cap = cap;
	}
	return &t->eh[n];
}

static uint32_t get(int kind, uint32_t n)
{
	const struct table *t = kind == STS_FILE ? &files : &comms;
	uint32_t eh = n < t->cap ? t->eh[n] : 0;

	if (kind == STS_FILE && n == 0)
		return file_default;
	return eh ? eh : kind == STS_FILE ? EH_RETURN : EH_FATAL;
}

static int set(int kind, uint32_t n, uint32_t eh)
{
	uint32_t *s;

	if (kind == STS_FILE && n == 0) {
		file_default = eh;
		return 0;
	}
	s = slot(kind == STS_FILE ? &files : &comms, n);
	if (!s)
		return -1;
	*s = eh;
	return 0;
}

void sts_comm_made(uint32_t parent, uint32_t comm)
{
	if (comm)   /* not MPI_COMM_NULL (a rank outside the new group) */
		set(STS_COMM, comm, get(STS_COMM, parent));
}

void sts_file_made(uint32_t file)
{
	set(STS_FILE, file, file_default);
}

/* ---- error classes, codes and strings the program adds ----
 * They live here, in the upper half, like handlers: saved with the
 * program's memory, the same after a restart above either MPI, and the real
 * MPI never sees them. Numbered in the program's ABI from above its
 * MPI_ERR_LASTCODE, classes and codes alike (MPI-3.1 8.5). */
#define USER_ERR_BASE (MPI_ERR_LASTCODE + 1)

static struct user_err {
	int cls;                /* a class's own value; a code's class */
	char *text;
} *uerr;
static int nuerr, uerr_cap;

static int user_err(int code)
{
	return code >= USER_ERR_BASE && code - USER_ERR_BASE < nuerr ? code - USER_ERR_BASE : -1;
}

static int add_err(int cls, int *out, const char *fn)
{
	if (!out)
		return sts_raise(STS_COMM, 1, MPI_ERR_ARG, fn);
	if (nuerr == uerr_cap) {
		int cap = uerr_cap ? 2 * uerr_cap : 16;
		struct user_err *u = realloc(uerr, (size_t)cap * sizeof(*u));

		if (!u)
			return sts_raise(STS_COMM, 1, MPI_ERR_NO_MEM, fn);
		uerr = u;
		uerr_cap = cap;
	}
	*out = USER_ERR_BASE + nuerr;
	uerr[nuerr++] = (struct user_err){ cls < 0 ? *out : cls, NULL };
	return MPI_SUCCESS;
}

int sts_err_last_used(void)
{
	return nuerr ? USER_ERR_BASE + nuerr - 1 : MPI_ERR_LASTCODE;
}

int PMPI_Add_error_class(int *errorclass)
{
	return add_err(-1, errorclass, "MPI_Add_error_class");
}
int MPI_Add_error_class(int *errorclass) __attribute__((weak, alias("PMPI_Add_error_class")));

int PMPI_Add_error_code(int errorclass, int *errorcode)
{
	int u = user_err(errorclass);

	if (errorclass < 0 || (errorclass > MPI_ERR_LASTCODE && (u < 0 || uerr[u].cls != errorclass)))
		return sts_raise(STS_COMM, 1, MPI_ERR_ARG, "MPI_Add_error_code");
	return add_err(errorclass, errorcode, "MPI_Add_error_code");
}
int MPI_Add_error_code(int errorclass, int *errorcode)
	__attribute__((weak, alias("PMPI_Add_error_code")));

int PMPI_Add_error_string(int errorcode, const char *string)
{
	int u = user_err(errorcode);
	char *t;

	if (u < 0 || !string || strlen(string) >= MPI_MAX_ERROR_STRING)
		return sts_raise(STS_COMM, 1, MPI_ERR_ARG, "MPI_Add_error_string");
	t = strdup(string);
	if (!t)
		return sts_raise(STS_COMM, 1, MPI_ERR_NO_MEM, "MPI_Add_error_string");
	free(uerr[u].text);
	uerr[u].text = t;
	return MPI_SUCCESS;
}
int MPI_Add_error_string(int errorcode, const char *string)
	__attribute__((weak, alias("PMPI_Add_error_string")));

int sts_gen_Error_class(int errorcode, int *errorclass);

int PMPI_Error_class(int errorcode, int *errorclass)
{
	int u = user_err(errorcode);

	if (u < 0)
		return sts_gen_Error_class(errorcode, errorclass);
	*errorclass = uerr[u].cls;
	return MPI_SUCCESS;
}
int MPI_Error_class(int errorcode, int *errorclass) __attribute__((weak, alias("PMPI_Error_class")));

int PMPI_Error_string(int errorcode, char *string, int *resultlen)
{
	int u = user_err(errorcode), ret;

	if (u >= 0) {   /* "" until MPI_Add_error_string (MPI-3.1 8.5) */
		const char *t = uerr[u].text ? uerr[u].text : "";

		*resultlen = (int)strlen(t);
		memcpy(string, t, (size_t)*resultlen + 1);
		return MPI_SUCCESS;
	}
	do
		STS_LOWER(ret = sts_lh->gen.Error_string(sts_err_in(errorcode), string, resultlen));
	while (ret == STS_AGAIN);
	return sts_err_world(ret, "MPI_Error_string");
}
int MPI_Error_string(int errorcode, char *string, int *resultlen)
	__attribute__((weak, alias("PMPI_Error_string")));

/* MPI_ERRORS_ARE_FATAL: one line, then the job ends */
static void fatal(int kind, uint32_t obj, int code, const char *fn)
{
	char msg[512], text[MPI_MAX_ERROR_STRING] = "";
	int len = 0, n, ret, ncls = sts_err_class_in(code);
	const char *cls = ncls > 0 ? sts_err_class_name(ncls) : "", *what = "its communicator";

	/* the lower half's text, without raising anything again; the
	 * program's own for a code it added */
	if (user_err(code) >= 0) {
		ret = PMPI_Error_string(code, text, &len);
		cls = "";
	} else {
		STS_LOWER(ret = sts_lh->gen.Error_string(ncls, text, &len));
	}
	if (ret != 0)
		text[0] = 0;
	if (!strncmp(text, cls, strlen(cls)))   /* Open MPI's text names the class */
		cls = "";
	if (kind == STS_FILE)
		what = obj ? "its file" : "MPI_FILE_NULL";
	else if (obj == 1 || obj == 2)
		what = sts_predef_name(STS_COMM, obj);
	n = snprintf(msg, sizeof(msg), "stasis: rank %d: %s failed: %s%s%s (the error handler of %s "
		     "is MPI_ERRORS_ARE_FATAL); aborting the job\n", sts_lh->world_rank, fn, cls,
		     *cls && *text ? ": " : "", text, what);
	sts_die(msg, n, code);
}

int sts_raise(int kind, uint32_t obj, int code, const char *fn)
{
	uint32_t eh;

	if (kind == STS_COMM && (obj == 0 || obj >= 0xfffffff0u))
		obj = 1;   /* no communicator: MPI_COMM_WORLD's (MPI-3.1 8.3) */
	if (kind == STS_FILE && obj >= 0xfffffff0u)
		obj = 0;
	eh = get(kind, obj);
	if (eh == EH_RETURN)
		return code;
	if (eh == EH_FATAL || eh < STS_FIRST_USER || eh - STS_FIRST_USER >= nhandlers)
		fatal(kind, obj, code, fn);
	if (handlers[eh - STS_FIRST_USER].call) {
		handlers[eh - STS_FIRST_USER].call(handlers[eh - STS_FIRST_USER].fn,
						   sts_out(kind, obj), &code);
	} else if (kind == STS_FILE) {
		MPI_File f = (MPI_File)(STS_HCAST)sts_out(STS_FILE, obj);

		((MPI_File_errhandler_function *)handlers[eh - STS_FIRST_USER].fn)(&f, &code);
	} else {
		MPI_Comm c = (MPI_Comm)(STS_HCAST)sts_out(STS_COMM, obj);

		((MPI_Comm_errhandler_function *)handlers[eh - STS_FIRST_USER].fn)(&c, &code);
	}
	return code;
}

int sts_raise_req(int code, const char *fn)
{
	struct sts_tls *me = sts_slot();
	uint32_t on = me->err_on;

	me->err_on = 1;
	if (on & STS_ERRH_FILE)
		return sts_raise(STS_FILE, on & ~STS_ERRH_FILE, code, fn);
	return sts_raise(STS_COMM, on, code, fn);
}

/* ---- the functions ---- */

int sts_errhandler_create(int kind, void (*fn)(void), sts_errh_caller *call, MPI_Errhandler *out,
			  const char *name)
{
	if (!fn || !out)
		return sts_raise(STS_COMM, 1, MPI_ERR_ARG, name);
	if (nhandlers == handlers_cap) {
		uint32_t cap = handlers_cap ? handlers_cap * 2 : 16;
		struct handler *h = realloc(handlers, cap * sizeof(*h));

		if (!h)
			return sts_raise(STS_COMM, 1, MPI_ERR_NO_MEM, name);
		handlers = h;
		handlers_cap = cap;
	}
	handlers[nhandlers] = (struct handler){ kind, fn, call };
	*out = (MPI_Errhandler)(STS_HCAST)sts_out(STS_ERRHANDLER, STS_FIRST_USER + nhandlers++);
	return MPI_SUCCESS;
}

/* the neutral handler of a handle the program gave for kind; 0 if none */
static uint32_t handler_in(int kind, MPI_Errhandler e)
{
	uint32_t eh = sts_in(STS_ERRHANDLER, STS_HVAL(e));

	if (eh == EH_FATAL || eh == EH_RETURN)
		return eh;
	if (eh >= STS_FIRST_USER && eh - STS_FIRST_USER < nhandlers &&
	    handlers[eh - STS_FIRST_USER].kind == kind)
		return eh;
	return 0;
}

/* A live object's neutral number, UINT32_MAX if the handle is not one.
 * MPI_FILE_NULL (neutral 0) counts as a file: its handler is the one
 * files open with (MPI-3.1 13.7). */
static uint32_t object_in(int kind, uint64_t abi)
{
	uint32_t n = sts_in(kind, abi);

	if (n >= 0xfffffff0u || (n == 0 && kind == STS_COMM))
		return UINT32_MAX;
	return n;
}

static int no_object(int kind, const char *fn)
{
	return sts_raise(STS_COMM, 1, kind == STS_FILE ? MPI_ERR_FILE : MPI_ERR_COMM, fn);
}

static int set_handler(int kind, uint64_t abi, MPI_Errhandler e, const char *fn)
{
	uint32_t n = object_in(kind, abi), eh = handler_in(kind, e);

	if (n == UINT32_MAX)
		return no_object(kind, fn);
	if (!eh)
		return sts_raise(kind, n, MPI_ERR_ARG, fn);
	if (set(kind, n, eh) != 0)
		return sts_raise(kind, n, MPI_ERR_NO_MEM, fn);
	return MPI_SUCCESS;
}

static int get_handler(int kind, uint64_t abi, MPI_Errhandler *e, const char *fn)
{
	uint32_t n = object_in(kind, abi);

	if (n == UINT32_MAX)
		return no_object(kind, fn);
	*e = (MPI_Errhandler)(STS_HCAST)sts_out(STS_ERRHANDLER, get(kind, n));
	return MPI_SUCCESS;
}

static int call_handler(int kind, uint64_t abi, int code, const char *fn)
{
	uint32_t n = object_in(kind, abi);

	if (n == UINT32_MAX)
		return no_object(kind, fn);
	sts_raise(kind, n, code, fn);
	return MPI_SUCCESS;   /* MPI-3.1 8.3.4: the handler was called */
}

#define FUNCTIONS(Kind, KIND, Obj)                                                             \
	int PMPI_##Kind##_create_errhandler(MPI_##Kind##_errhandler_function *fn,              \
					    MPI_Errhandler *e)                                 \
	{                                                                                      \
		return sts_errhandler_create(KIND, (void (*)(void))fn, NULL, e,                \
					     "MPI_" #Kind "_create_errhandler");               \
	}                                                                                      \
	int MPI_##Kind##_create_errhandler(MPI_##Kind##_errhandler_function *fn,               \
					   MPI_Errhandler *e)                                  \
		__attribute__((weak, alias("PMPI_" #Kind "_create_errhandler")));              \
	int PMPI_##Kind##_set_errhandler(Obj o, MPI_Errhandler e)                              \
	{                                                                                      \
		return set_handler(KIND, STS_HVAL(o), e, "MPI_" #Kind "_set_errhandler");       \
	}                                                                                      \
	int MPI_##Kind##_set_errhandler(Obj o, MPI_Errhandler e)                               \
		__attribute__((weak, alias("PMPI_" #Kind "_set_errhandler")));                 \
	int PMPI_##Kind##_get_errhandler(Obj o, MPI_Errhandler *e)                             \
	{                                                                                      \
		return get_handler(KIND, STS_HVAL(o), e, "MPI_" #Kind "_get_errhandler");       \
	}                                                                                      \
	int MPI_##Kind##_get_errhandler(Obj o, MPI_Errhandler *e)                              \
		__attribute__((weak, alias("PMPI_" #Kind "_get_errhandler")));                 \
	int PMPI_##Kind##_call_errhandler(Obj o, int code)                                     \
	{                                                                                      \
		return call_handler(KIND, STS_HVAL(o), code, "MPI_" #Kind "_call_errhandler");  \
	}                                                                                      \
	int MPI_##Kind##_call_errhandler(Obj o, int code)                                      \
		__attribute__((weak, alias("PMPI_" #Kind "_call_errhandler")));

FUNCTIONS(Comm, STS_COMM, MPI_Comm)
FUNCTIONS(File, STS_FILE, MPI_File)

/* Handlers are never reused (a communicator may still use a freed one):
 * freeing one only nulls the program's handle. So does freeing a
 * predefined one, which MPI_Comm_get_errhandler may have returned. */
int PMPI_Errhandler_free(MPI_Errhandler *e)
{
	uint32_t eh = e ? sts_in(STS_ERRHANDLER, STS_HVAL(*e)) : 0;

	if (eh != EH_FATAL && eh != EH_RETURN &&
	    (eh < STS_FIRST_USER || eh - STS_FIRST_USER >= nhandlers))
		return sts_raise(STS_COMM, 1, MPI_ERR_ARG, "MPI_Errhandler_free");
	*e = MPI_ERRHANDLER_NULL;
	return MPI_SUCCESS;
}
int MPI_Errhandler_free(MPI_Errhandler *e) __attribute__((weak, alias("PMPI_Errhandler_free")));
