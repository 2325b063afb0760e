/* uh_attr.c - attributes, keyvals, object names and MPI_Alloc_mem, kept
 * entirely in the upper half (docs/split.md, "Attributes").
 *
 * None of this reaches the real MPI: keyvals, attribute values and names
 * live in the upper half's memory, so a checkpoint saves them with the
 * program's own data and a restart, under either MPI, finds them as they
 * were; copy and delete callbacks run here, in the upper half, and never
 * need a trampoline. Only the predefined attributes (MPI_TAG_UB, MPI_HOST,
 * MPI_IO, MPI_UNIVERSE_SIZE, MPI_APPNUM) are asked of the lower half, on
 * every call, because they belong to the MPI library running now.
 * Communicators and datatypes carry attributes; windows are not supported.
 */
#include <stdio.h>
#include <stdlib.h>

/* MPI-1's names (MPI_Attr_get, MPI_NULL_COPY_FN...) are deprecated in
 * Open MPI's mpi.h; a program may still use them, so they are defined */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <string.h>

#include "uh.h"

int sts_gen_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm);
int sts_gen_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm);
int sts_gen_Comm_free(MPI_Comm *comm);
int sts_gen_Type_dup(MPI_Datatype type, MPI_Datatype *newtype);
int sts_gen_Type_free(MPI_Datatype *type);

/* Keyvals the program creates: numbers no ABI uses for a predefined one
 * (Open MPI's are below 64, MPICH's 0x644000xx); never reused. */
#define KEYVAL_BASE 0x1000

struct keyval {
	int kind;               /* STS_COMM or STS_DATATYPE */
	int freed;
	void *copy, *del;       /* the program's functions; NULL: none */
	void *extra;
};

struct attr {
	uint32_t obj;           /* neutral handle */
	int kind;
	int keyval;
	void *val;
};

struct name {
	uint32_t obj;
	int kind;
	char text[MPI_MAX_OBJECT_NAME];
};

static struct keyval *keyvals;
static int nkeyvals;
static struct attr *attrs;      /* in the order they were set */
static int nattrs, attrs_cap;
static struct name *names;
static int nnames, names_cap;

/* ---- the predefined copy functions of each ABI ---- */

#ifdef OPEN_MPI
#define NULL_COPY(kind, t)                                                               \
	int OMPI_C_MPI_##kind##_NULL_COPY_FN(t o, int k, void *e, void *in, void *out, int *f) \
	{                                                                                \
		(void)o, (void)k, (void)e, (void)in, (void)out;                          \
		*f = 0;                                                                  \
		return MPI_SUCCESS;                                                      \
	}
#define DUP(kind, t)                                                                 \
	int OMPI_C_MPI_##kind##_DUP_FN(t o, int k, void *e, void *in, void *out, int *f) \
	{                                                                            \
		(void)o, (void)k, (void)e;                                           \
		*(void **)out = in;                                                  \
		*f = 1;                                                              \
		return MPI_SUCCESS;                                                  \
	}
#define NULL_DELETE(kind, t)                                                   \
	int OMPI_C_MPI_##kind##_NULL_DELETE_FN(t o, int k, void *v, void *e)   \
	{                                                                      \
		(void)o, (void)k, (void)v, (void)e;                            \
		return MPI_SUCCESS;                                            \
	}
NULL_COPY(COMM, MPI_Comm)
DUP(COMM, MPI_Comm)
NULL_DELETE(COMM, MPI_Comm)
NULL_COPY(TYPE, MPI_Datatype)
DUP(TYPE, MPI_Datatype)
NULL_DELETE(TYPE, MPI_Datatype)
NULL_COPY(WIN, MPI_Win)
DUP(WIN, MPI_Win)
NULL_DELETE(WIN, MPI_Win)

int OMPI_C_MPI_NULL_COPY_FN(MPI_Comm o, int k, void *e, void *in, void *out, int *f)
{
	return OMPI_C_MPI_COMM_NULL_COPY_FN(o, k, e, in, out, f);
}

int OMPI_C_MPI_DUP_FN(MPI_Comm o, int k, void *e, void *in, void *out, int *f)
{
	return OMPI_C_MPI_COMM_DUP_FN(o, k, e, in, out, f);
}

int OMPI_C_MPI_NULL_DELETE_FN(MPI_Comm o, int k, void *v, void *e)
{
	return OMPI_C_MPI_COMM_NULL_DELETE_FN(o, k, v, e);
}

/* the library's own no-op functions count as none */
static void *fn_or_null(void *fn)
{
	if (fn == (void *)OMPI_C_MPI_COMM_NULL_COPY_FN || fn == (void *)OMPI_C_MPI_TYPE_NULL_COPY_FN ||
	    fn == (void *)OMPI_C_MPI_NULL_COPY_FN || fn == (void *)OMPI_C_MPI_COMM_NULL_DELETE_FN ||
	    fn == (void *)OMPI_C_MPI_TYPE_NULL_DELETE_FN || fn == (void *)OMPI_C_MPI_NULL_DELETE_FN)
		return NULL;
	return fn;
}
#else
/* MPICH's MPI_*_NULL_*_FN are null pointers; its MPI_*_DUP_FN is this */
int MPIR_Dup_fn(MPI_Comm o, int k, void *e, void *in, void *out, int *f)
{
	(void)o, (void)k, (void)e;
	*(void **)out = in;
	*f = 1;
	return MPI_SUCCESS;
}

static void *fn_or_null(void *fn)
{
	return fn;
}
#endif

/* ---- the store ---- */

static int grow(void **v, int *cap, int n, size_t size)
{
	if (n < *cap)
		return 0;
	int c = *cap ? 2 * *cap : 16;
	void *p = realloc(*v, (size_t)c * size);

	if (!p)
		return MPI_ERR_NO_MEM;
	*v = p;
	*cap = c;
	return 0;
}

static struct keyval *keyval_of(int kind, int k)
{
	if (k < KEYVAL_BASE || k >= KEYVAL_BASE + nkeyvals)
		return NULL;
	struct keyval *kv = &keyvals[k - KEYVAL_BASE];

	return kv->kind == kind && !kv->freed ? kv : NULL;
}

static struct attr *attr_of(int kind, uint32_t obj, int k)
{
	for (int i = 0; i < nattrs; i++)
		if (attrs[i].obj == obj && attrs[i].kind == kind && attrs[i].keyval == k)
			return &attrs[i];
	return NULL;
}

static void attr_drop(struct attr *a)
{
	memmove(a, a + 1, (size_t)(attrs + nattrs - (a + 1)) * sizeof(*a));
	nattrs--;
}

static int attr_add(int kind, uint32_t obj, int k, void *val)
{
	if (grow((void **)&attrs, &attrs_cap, nattrs, sizeof(*attrs)))
		return MPI_ERR_NO_MEM;
	attrs[nattrs++] = (struct attr){ obj, kind, k, val };
	return MPI_SUCCESS;
}

/* The object's neutral handle, 0 when it is not a live one of its kind. */
static uint32_t neutral_of(int kind, uint64_t abi)
{
	uint32_t n = sts_in(kind, abi);

	return n == 0xfffffffeu ? 0 : n;
}

static int bad_obj(int kind)
{
	return kind == STS_COMM ? MPI_ERR_COMM : MPI_ERR_TYPE;
}

/* The program's callbacks, called with the object as the ABI types it. */
static int call_copy(int kind, uint64_t obj, const struct keyval *kv, int k, void *in, void *out,
		     int *flag)
{
	if (kind == STS_COMM)
		return ((MPI_Comm_copy_attr_function *)kv->copy)((MPI_Comm)(STS_HCAST)obj, k, kv->extra,
								   in, out, flag);
	return ((MPI_Type_copy_attr_function *)kv->copy)((MPI_Datatype)(STS_HCAST)obj, k, kv->extra,
							   in, out, flag);
}

/* The delete callback of one attribute; keyvals freed meanwhile still
 * have theirs (MPI-3.1 6.7.2: a freed keyval lives on in its attributes). */
static int call_delete(uint64_t obj, const struct attr *a)
{
	const struct keyval *kv = &keyvals[a->keyval - KEYVAL_BASE];

	if (!kv->del)
		return MPI_SUCCESS;
	if (a->kind == STS_COMM)
		return ((MPI_Comm_delete_attr_function *)kv->del)((MPI_Comm)(STS_HCAST)obj, a->keyval,
								    a->val, kv->extra);
	return ((MPI_Type_delete_attr_function *)kv->del)((MPI_Datatype)(STS_HCAST)obj, a->keyval,
							    a->val, kv->extra);
}

static int create_keyval(int kind, void *copy, void *del, int *keyval, void *extra)
{
	struct keyval *p = realloc(keyvals, (size_t)(nkeyvals + 1) * sizeof(*p));

	if (!p)
		return MPI_ERR_NO_MEM;
	keyvals = p;
	keyvals[nkeyvals] = (struct keyval){ kind, 0, fn_or_null(copy), fn_or_null(del), extra };
	*keyval = KEYVAL_BASE + nkeyvals++;
	return MPI_SUCCESS;
}

static int free_keyval(int kind, int *keyval)
{
	struct keyval *kv = keyval_of(kind, *keyval);

	if (!kv)
		return MPI_ERR_KEYVAL;
	kv->freed = 1;
	*keyval = MPI_KEYVAL_INVALID;
	return MPI_SUCCESS;
}

static int set_attr(int kind, uint64_t abi_obj, int k, void *val)
{
	uint32_t obj = neutral_of(kind, abi_obj);
	struct attr *a;
	int ret;

	if (!obj)
		return bad_obj(kind);
	if (!keyval_of(kind, k))
		return MPI_ERR_KEYVAL;
	a = attr_of(kind, obj, k);
	if (a) {   /* the old value is deleted first, as with MPI_Comm_delete_attr */
		ret = call_delete(abi_obj, a);
		if (ret != MPI_SUCCESS)
			return ret;
		a->val = val;
		return MPI_SUCCESS;
	}
	return attr_add(kind, obj, k, val);
}

static int delete_attr(int kind, uint64_t abi_obj, int k)
{
	uint32_t obj = neutral_of(kind, abi_obj);
	struct attr *a;
	int ret;

	if (!obj)
		return bad_obj(kind);
	if (k < KEYVAL_BASE || k >= KEYVAL_BASE + nkeyvals || keyvals[k - KEYVAL_BASE].kind != kind)
		return MPI_ERR_KEYVAL;
	a = attr_of(kind, obj, k);
	if (!a)
		return MPI_ERR_KEYVAL;
	ret = call_delete(abi_obj, a);
	if (ret == MPI_SUCCESS)
		attr_drop(a);
	return ret;
}

/* The predefined attributes: this MPI library's, asked every time. */
static int predef_attr(int k, void *val, int *flag)
{
	static int value[8];
	int which, ret;

	*flag = 0;
	if (k == MPI_TAG_UB)
		which = STS_ATTR_TAG_UB;
	else if (k == MPI_HOST)
		which = STS_ATTR_HOST;
	else if (k == MPI_IO)
		which = STS_ATTR_IO;
	else if (k == MPI_UNIVERSE_SIZE)
		which = STS_ATTR_UNIVERSE_SIZE;
	else if (k == MPI_APPNUM)
		which = STS_ATTR_APPNUM;
	else if (k == MPI_WTIME_IS_GLOBAL) {
		value[6] = 0;   /* MPI_Wtime is this node's clock (uh_core.c) */
		*(int **)val = &value[6];
		*flag = 1;
		return MPI_SUCCESS;
	} else if (k == MPI_LASTUSEDCODE) {
		value[7] = sts_err_last_used();   /* MPI_Add_error_class and _code's */
		*(int **)val = &value[7];
		*flag = 1;
		return MPI_SUCCESS;
	} else {
		return MPI_ERR_KEYVAL;
	}
	STS_LOWER(ret = sts_lh->hand.attr_predef(which, &value[which], flag));
	if (ret == 0 && *flag) {
		if (which == STS_ATTR_HOST || which == STS_ATTR_IO)
			value[which] = sts_rank_out(value[which]);
		*(int **)val = &value[which];
	}
	return sts_err_out(ret);
}

static int get_attr(int kind, uint64_t abi_obj, int k, void *val, int *flag)
{
	uint32_t obj = neutral_of(kind, abi_obj);
	struct attr *a;

	*flag = 0;
	if (!obj)
		return bad_obj(kind);
	if (kind == STS_COMM && (k < KEYVAL_BASE || k >= KEYVAL_BASE + nkeyvals))
		return predef_attr(k, val, flag);   /* MPI_ERR_KEYVAL for another */
	if (k < KEYVAL_BASE || k >= KEYVAL_BASE + nkeyvals || keyvals[k - KEYVAL_BASE].kind != kind)
		return MPI_ERR_KEYVAL;
	a = attr_of(kind, obj, k);
	if (a) {
		*(void **)val = a->val;
		*flag = 1;
	}
	return MPI_SUCCESS;
}

/* After a dup made new_obj: each attribute of old goes through its copy
 * callback, in the order they were set. */
static int copy_attrs(int kind, uint64_t abi_old, uint64_t abi_new)
{
	uint32_t old = neutral_of(kind, abi_old), new_obj = neutral_of(kind, abi_new);
	int n = nattrs;

	for (int i = 0; i < n; i++) {
		struct attr a = attrs[i];
		const struct keyval *kv;
		void *out = NULL;
		int flag = 0, ret;

		if (a.obj != old || a.kind != kind)
			continue;
		kv = &keyvals[a.keyval - KEYVAL_BASE];
		if (!kv->copy)
			continue;
		ret = call_copy(kind, abi_old, kv, a.keyval, a.val, &out, &flag);
		if (ret != MPI_SUCCESS)
			return ret;
		if (flag && attr_add(kind, new_obj, a.keyval, out) != MPI_SUCCESS)
			return MPI_ERR_NO_MEM;
	}
	return MPI_SUCCESS;
}

/* Before a free: every attribute of obj is deleted, the last set first. */
static int delete_all(int kind, uint64_t abi_obj)
{
	uint32_t obj = neutral_of(kind, abi_obj);

	for (int i = nattrs - 1; i >= 0; i--) {
		if (attrs[i].obj != obj || attrs[i].kind != kind)
			continue;
		int ret = call_delete(abi_obj, &attrs[i]);

		if (ret != MPI_SUCCESS)
			return ret;
		attr_drop(&attrs[i]);
	}
	return MPI_SUCCESS;
}

static void forget_names(int kind, uint32_t obj);

/* ---- communicators ---- */

int PMPI_Comm_create_keyval(MPI_Comm_copy_attr_function *copy, MPI_Comm_delete_attr_function *del,
			    int *keyval, void *extra)
{
	return sts_fail(create_keyval(STS_COMM, (void *)copy, (void *)del, keyval, extra), 1,
			"MPI_Comm_create_keyval");
}

int PMPI_Comm_free_keyval(int *keyval)
{
	return sts_fail(free_keyval(STS_COMM, keyval), 1, "MPI_Comm_free_keyval");
}

int PMPI_Comm_set_attr(MPI_Comm comm, int keyval, void *val)
{
	return sts_fail(set_attr(STS_COMM, STS_HVAL(comm), keyval, val),
			sts_in(STS_COMM, STS_HVAL(comm)), "MPI_Comm_set_attr");
}

int PMPI_Comm_get_attr(MPI_Comm comm, int keyval, void *val, int *flag)
{
	return sts_fail(get_attr(STS_COMM, STS_HVAL(comm), keyval, val, flag),
			sts_in(STS_COMM, STS_HVAL(comm)), "MPI_Comm_get_attr");
}

int PMPI_Comm_delete_attr(MPI_Comm comm, int keyval)
{
	return sts_fail(delete_attr(STS_COMM, STS_HVAL(comm), keyval),
			sts_in(STS_COMM, STS_HVAL(comm)), "MPI_Comm_delete_attr");
}

/* after the real dup: the attributes copied by their keyvals' callbacks */
static int dup_attrs(MPI_Comm comm, MPI_Comm *newcomm, int ret, const char *fn)
{
	if (ret != MPI_SUCCESS)
		return ret;
	ret = copy_attrs(STS_COMM, STS_HVAL(comm), STS_HVAL(*newcomm));
	if (ret != MPI_SUCCESS) {   /* MPI-3.1 6.4.2: the new communicator is not made */
		delete_all(STS_COMM, STS_HVAL(*newcomm));
		sts_gen_Comm_free(newcomm);
	}
	return sts_fail(ret, sts_in(STS_COMM, STS_HVAL(comm)), fn);
}

int PMPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
	return dup_attrs(comm, newcomm, sts_gen_Comm_dup(comm, newcomm), "MPI_Comm_dup");
}

int PMPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm)
{
	return dup_attrs(comm, newcomm, sts_gen_Comm_dup_with_info(comm, info, newcomm),
			 "MPI_Comm_dup_with_info");
}

/* MPI_Comm_idup completes at once: a duplicate like MPI_Comm_dup's (a
 * communicator the lower half records when it is made, which a pending
 * one could not be), and a request that is complete, with an empty
 * status. A program that needs progress between the call and its wait
 * (one member sends another a message that member receives before it
 * calls MPI_Comm_idup) would wait for good. */
int PMPI_Comm_idup(MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request)
{
	int ret = PMPI_Comm_dup(comm, newcomm);

	if (ret != MPI_SUCCESS)
		return ret;
	return PMPI_Irecv(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, comm, request);
}

/* Every communicator of a job under Stasis is one of its own (MPI_Comm_spawn
 * and the connections between jobs are refused): disconnecting one is
 * freeing it once every member got there (MPI-3.1 10.5.4: all its
 * communication is complete and matched by then) */
int PMPI_Comm_disconnect(MPI_Comm *comm)
{
	int ret = PMPI_Barrier(*comm);

	return ret != MPI_SUCCESS ? ret : PMPI_Comm_free(comm);
}

int PMPI_Comm_free(MPI_Comm *comm)
{
	uint32_t n = neutral_of(STS_COMM, STS_HVAL(*comm));
	int ret;

	if (n && n >= STS_FIRST_USER) {
		ret = delete_all(STS_COMM, STS_HVAL(*comm));
		if (ret != MPI_SUCCESS)
			return sts_fail(ret, n, "MPI_Comm_free");
	}
	ret = sts_gen_Comm_free(comm);
	if (ret == MPI_SUCCESS)
		forget_names(STS_COMM, n);
	return ret;
}

/* MPI-1's names for the same */
int PMPI_Keyval_create(MPI_Copy_function *copy, MPI_Delete_function *del, int *keyval, void *extra)
{
	return create_keyval(STS_COMM, (void *)copy, (void *)del, keyval, extra);
}

int PMPI_Keyval_free(int *keyval)
{
	return PMPI_Comm_free_keyval(keyval);
}

int PMPI_Attr_put(MPI_Comm comm, int keyval, void *val)
{
	return PMPI_Comm_set_attr(comm, keyval, val);
}

int PMPI_Attr_get(MPI_Comm comm, int keyval, void *val, int *flag)
{
	return PMPI_Comm_get_attr(comm, keyval, val, flag);
}

int PMPI_Attr_delete(MPI_Comm comm, int keyval)
{
	return PMPI_Comm_delete_attr(comm, keyval);
}

/* Attributes of MPI_COMM_SELF are deleted first thing in MPI_Finalize
 * (MPI-3.1 8.7.1), which libraries use as a hook. */
int sts_attr_finalize(void)
{
	return delete_all(STS_COMM, STS_HVAL(MPI_COMM_SELF));
}

/* ---- datatypes ---- */

int PMPI_Type_create_keyval(MPI_Type_copy_attr_function *copy, MPI_Type_delete_attr_function *del,
			    int *keyval, void *extra)
{
	return sts_fail(create_keyval(STS_DATATYPE, (void *)copy, (void *)del, keyval, extra), 1,
			"MPI_Type_create_keyval");
}

int PMPI_Type_free_keyval(int *keyval)
{
	return sts_fail(free_keyval(STS_DATATYPE, keyval), 1, "MPI_Type_free_keyval");
}

int PMPI_Type_set_attr(MPI_Datatype type, int keyval, void *val)
{
	return sts_fail(set_attr(STS_DATATYPE, STS_HVAL(type), keyval, val), 1, "MPI_Type_set_attr");
}

int PMPI_Type_get_attr(MPI_Datatype type, int keyval, void *val, int *flag)
{
	return sts_fail(get_attr(STS_DATATYPE, STS_HVAL(type), keyval, val, flag), 1,
			"MPI_Type_get_attr");
}

int PMPI_Type_delete_attr(MPI_Datatype type, int keyval)
{
	return sts_fail(delete_attr(STS_DATATYPE, STS_HVAL(type), keyval), 1, "MPI_Type_delete_attr");
}

int PMPI_Type_dup(MPI_Datatype type, MPI_Datatype *newtype)
{
	int ret = sts_gen_Type_dup(type, newtype);

	if (ret != MPI_SUCCESS)
		return ret;
	ret = copy_attrs(STS_DATATYPE, STS_HVAL(type), STS_HVAL(*newtype));
	if (ret != MPI_SUCCESS) {
		delete_all(STS_DATATYPE, STS_HVAL(*newtype));
		sts_gen_Type_free(newtype);
	}
	return ret;
}

int PMPI_Type_free(MPI_Datatype *type)
{
	uint32_t n = neutral_of(STS_DATATYPE, STS_HVAL(*type));
	int ret;

	if (n && n >= STS_FIRST_USER) {
		ret = delete_all(STS_DATATYPE, STS_HVAL(*type));
		if (ret != MPI_SUCCESS)
			return ret;
	}
	ret = sts_gen_Type_free(type);
	if (ret == MPI_SUCCESS)
		forget_names(STS_DATATYPE, n);
	return ret;
}

/* ---- names ---- */

static struct name *name_of(int kind, uint32_t obj)
{
	for (int i = 0; i < nnames; i++)
		if (names[i].obj == obj && names[i].kind == kind)
			return &names[i];
	return NULL;
}

static void forget_names(int kind, uint32_t obj)
{
	struct name *n = name_of(kind, obj);

	if (n)
		*n = names[--nnames];
}

static int set_name(int kind, uint64_t abi_obj, const char *text)
{
	uint32_t obj = neutral_of(kind, abi_obj);
	struct name *n;

	if (!obj)
		return bad_obj(kind);
	n = name_of(kind, obj);
	if (!n) {
		if (grow((void **)&names, &names_cap, nnames, sizeof(*names)))
			return MPI_ERR_NO_MEM;
		n = &names[nnames++];
		n->obj = obj;
		n->kind = kind;
	}
	snprintf(n->text, sizeof(n->text), "%s", text);
	return MPI_SUCCESS;
}

/* A name set by the program; a predefined object's own name otherwise
 * (MPI_COMM_WORLD, MPI_INT...); an empty one for the rest. */
static int get_name(int kind, uint64_t abi_obj, char *text, int *len)
{
	uint32_t obj = neutral_of(kind, abi_obj);
	const struct name *n;
	const char *s = "";

	if (!obj)
		return bad_obj(kind);
	n = name_of(kind, obj);
	if (n)
		s = n->text;
	else if (obj < STS_FIRST_USER)
		s = sts_predef_name(kind, obj);
	*len = snprintf(text, MPI_MAX_OBJECT_NAME, "%s", s);
	if (*len >= MPI_MAX_OBJECT_NAME)
		*len = MPI_MAX_OBJECT_NAME - 1;
	return MPI_SUCCESS;
}

int PMPI_Comm_set_name(MPI_Comm comm, const char *text)
{
	return sts_fail(set_name(STS_COMM, STS_HVAL(comm), text),
			sts_in(STS_COMM, STS_HVAL(comm)), "MPI_Comm_set_name");
}

int PMPI_Comm_get_name(MPI_Comm comm, char *text, int *len)
{
	return sts_fail(get_name(STS_COMM, STS_HVAL(comm), text, len),
			sts_in(STS_COMM, STS_HVAL(comm)), "MPI_Comm_get_name");
}

int PMPI_Type_set_name(MPI_Datatype type, const char *text)
{
	return sts_fail(set_name(STS_DATATYPE, STS_HVAL(type), text), 1, "MPI_Type_set_name");
}

int PMPI_Type_get_name(MPI_Datatype type, char *text, int *len)
{
	return sts_fail(get_name(STS_DATATYPE, STS_HVAL(type), text, len), 1, "MPI_Type_get_name");
}

/* ---- memory: the program's own malloc, saved with the upper half ---- */

int PMPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr)
{
	void *p;

	(void)info;
	if (size < 0)
		return MPI_ERR_SIZE;
	p = malloc(size ? (size_t)size : 1);
	if (!p)
		return MPI_ERR_NO_MEM;
	*(void **)baseptr = p;
	return MPI_SUCCESS;
}

int PMPI_Free_mem(void *base)
{
	free(base);
	return MPI_SUCCESS;
}

#define ALIAS(ret, name, params) ret name params __attribute__((weak, alias("P" #name)))
ALIAS(int, MPI_Comm_create_keyval, (MPI_Comm_copy_attr_function *, MPI_Comm_delete_attr_function *,
				    int *, void *));
ALIAS(int, MPI_Comm_free_keyval, (int *));
ALIAS(int, MPI_Comm_set_attr, (MPI_Comm, int, void *));
ALIAS(int, MPI_Comm_get_attr, (MPI_Comm, int, void *, int *));
ALIAS(int, MPI_Comm_delete_attr, (MPI_Comm, int));
ALIAS(int, MPI_Comm_dup, (MPI_Comm, MPI_Comm *));
ALIAS(int, MPI_Comm_dup_with_info, (MPI_Comm, MPI_Info, MPI_Comm *));
ALIAS(int, MPI_Comm_idup, (MPI_Comm, MPI_Comm *, MPI_Request *));
ALIAS(int, MPI_Comm_free, (MPI_Comm *));
ALIAS(int, MPI_Comm_disconnect, (MPI_Comm *));
ALIAS(int, MPI_Keyval_create, (MPI_Copy_function *, MPI_Delete_function *, int *, void *));
ALIAS(int, MPI_Keyval_free, (int *));
ALIAS(int, MPI_Attr_put, (MPI_Comm, int, void *));
ALIAS(int, MPI_Attr_get, (MPI_Comm, int, void *, int *));
ALIAS(int, MPI_Attr_delete, (MPI_Comm, int));
ALIAS(int, MPI_Type_create_keyval, (MPI_Type_copy_attr_function *, MPI_Type_delete_attr_function *,
				    int *, void *));
ALIAS(int, MPI_Type_free_keyval, (int *));
ALIAS(int, MPI_Type_set_attr, (MPI_Datatype, int, void *));
ALIAS(int, MPI_Type_get_attr, (MPI_Datatype, int, void *, int *));
ALIAS(int, MPI_Type_delete_attr, (MPI_Datatype, int));
ALIAS(int, MPI_Type_dup, (MPI_Datatype, MPI_Datatype *));
ALIAS(int, MPI_Type_free, (MPI_Datatype *));
ALIAS(int, MPI_Comm_set_name, (MPI_Comm, const char *));
ALIAS(int, MPI_Comm_get_name, (MPI_Comm, char *, int *));
ALIAS(int, MPI_Type_set_name, (MPI_Datatype, const char *));
ALIAS(int, MPI_Type_get_name, (MPI_Datatype, char *, int *));
ALIAS(int, MPI_Alloc_mem, (MPI_Aint, MPI_Info, void *));
ALIAS(int, MPI_Free_mem, (void *));
