/* lh_io.c - MPI-IO files across a checkpoint (docs/split.md, "Files").
 *
 * MPI_File_open, MPI_File_set_view, MPI_File_set_atomicity and
 * MPI_File_close are written here (functions.list: lower); every other
 * supported file function is generated and only needs the file's real
 * handle. Each open file has a record in the ledger: the absolute path, the
 * access mode, the members of the communicator it was opened on as world
 * ranks, the view (displacement, data representation, and the etype and
 * filetype as constructions, so that the program may free them) and the
 * atomicity. At a checkpoint every rank also records its individual file
 * pointer (lh_io_save). At restart (lh_state.c, in creation order) the file
 * is opened again on a communicator of the same members, without
 * MPI_MODE_CREATE and MPI_MODE_EXCL, its view and atomicity are set again
 * and the file pointer is put back. The file's contents are the file
 * system's: Stasis does not save them (docs/split.md says why).
 *
 * A file opened by more than one rank also gets a communicator of its own,
 * a duplicate of the one it was opened on that the program never sees:
 * its collectives with no non-blocking form pass their entry barrier and
 * are counted on it (lh_coll.c), whether or not the program still holds
 * the communicator it opened the file on. It is a communicator like the
 * program's (a record, rebuilt at restart before the file), let go of
 * when the file is closed.
 */
#include <errno.h>
#include <limits.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lh.h"
#include "lh_ledger.h"
#include "lh_spare.h"

struct rec_file {
	int amode;
	int atomic;
	int viewed;             /* set_view was called */
	char datarep[64];
	long long disp;
	uint32_t etype_pre, ftype_pre;   /* predefined: the neutral number */
	void *etype, *ftype;    /* otherwise their constructions (lh_state.c) */
	long long pos;          /* the individual file pointer at the checkpoint */
	long long spos;         /* the shared one; -1: the MPI has none for it */
	int split;              /* a split collective begun: 1 + enum split_op */
	struct sts_status split_status;   /* its status, for its end */
	uint32_t comm;          /* its own communicator (2: MPI_COMM_SELF) */
	char *path;
	int n;                  /* members of the communicator */
	int ranks[];            /* their world ranks */
};

static MPI_File real_file(uint32_t fh)
{
	return (MPI_File)(LH_HCAST)lh_real(STS_FILE, fh);
}

static struct rec_file *rec_of(uint32_t fh)
{
	struct lh_slot *s = lh_slot_of(STS_FILE, fh);

	return s ? s->rec : NULL;
}

/* The path as it will be found again from any directory. */
static char *abs_path(const char *name)
{
	char cwd[PATH_MAX];
	size_t len;
	char *p;

	if (name[0] == '/' || strchr(name, ':') || !getcwd(cwd, sizeof(cwd)))
		cwd[0] = 0;   /* absolute, or with a prefix of ROMIO's ("ufs:") */
	len = strlen(cwd) + strlen(name) + 2;
	p = lg_alloc(len);
	if (p)
		snprintf(p, len, "%s%s%s", cwd, cwd[0] ? "/" : "", name);
	return p;
}

static struct rec_file *record_file(uint32_t comm, const char *name, int amode)
{
	int size = 0;
	struct rec_file *r;

	MPI_Comm_size((MPI_Comm)(LH_HCAST)lh_real(STS_COMM, comm), &size);
	r = lg_calloc(sizeof(*r) + (size_t)size * sizeof(int));
	if (!r)
		return NULL;
	r->amode = amode;
	r->n = size;
	r->etype_pre = r->ftype_pre = UINT32_MAX;
	for (int i = 0; i < size; i++)
		r->ranks[i] = lh_world_of(comm, i);
	r->path = abs_path(name);
	if (!r->path) {
		lg_free(r);
		return NULL;
	}
	return r;
}

static void forget_view(struct rec_file *r)
{
	lh_type_forget(r->etype);
	lh_type_forget(r->ftype);
	r->etype = r->ftype = NULL;
	r->etype_pre = r->ftype_pre = UINT32_MAX;
	r->viewed = 0;
}

void lh_io_forget(void *rec)
{
	struct rec_file *r = rec;

	forget_view(r);
	lg_free(r->path);
	lg_free(r);
}

/* the file's own communicator (lh_io.c's header) goes */
static void comm_gone(uint32_t comm)
{
	MPI_Comm c = (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, comm);

	if (comm <= 2)
		return;
	if (!lh_coll_comm_freeing(comm, &c))
		MPI_Comm_free(&c);
	lh_release(STS_COMM, comm);
}

/* Open MPI's OMPIO (its shared file pointer component "sm") keeps a POSIX
 * semaphore named after the file's base name, /dev/shm/sem.OMPIO_<name>,
 * and MPI_File_open takes it. A rank killed while it held it leaves it
 * taken, and every later open of a file of that base name on the node
 * waits for good; after a kill is when Stasis restarts jobs. So one member
 * of the opening communicator, before any other can open the file, waits
 * a second for it; one still taken then is removed (the open makes a new
 * one) and said. With MPICH (ROMIO) there is none. */
static void ompio_unstick(const char *path)
{
#ifdef OPEN_MPI
	const char *base = strrchr(path, '/');
	char name[NAME_MAX + 1];
	struct timespec ts;
	sem_t *s;
	int ret;

	base = base ? base + 1 : path;
	if (snprintf(name, sizeof(name), "/OMPIO_%s", base) >= (int)sizeof(name))
		return;
	s = sem_open(name, 0);
	if (s == SEM_FAILED)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 1;
	while ((ret = sem_timedwait(s, &ts)) != 0 && errno == EINTR)
		;
	if (ret == 0)
		sem_post(s);
	else if (errno == ETIMEDOUT && sem_unlink(name) == 0)
		lh_log(LOG_WARN, "rank %d: %s: removed /dev/shm/sem.%s, Open MPI's lock "
		       "for that file name, left taken by a killed rank (opening the file "
		       "would wait for good)", lh_info->world_rank, path, name + 1);
	sem_close(s);
#else
	(void)path;
#endif
}

int lh_File_open(uint32_t comm, const char *name, int amode, uint32_t info, uint32_t *fh)
{
	MPI_Comm real = (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, comm), own;
	MPI_Info in = (MPI_Info)(LH_HCAST)lh_real(STS_INFO, info);
	uint32_t mine = 2;
	MPI_File f;
	struct lh_slot *s;
	unsigned depth;
	int ret = lh_coll_blocking(comm), size = 1, me = 0;

	if (ret)
		return ret;
	/* every member is here (past the entry barrier), and none opens the
	 * file before the first one's ompio_unstick: MPI_Comm_dup returns on
	 * none before all called it. Its own communicator first, so that a
	 * restart builds it before the file */
	MPI_Comm_size(real, &size);
	MPI_Comm_rank(real, &me);
	if (me == 0)
		ompio_unstick(name);
	/* the real calls wait for the other members, one of which may be
	 * another thread of this rank: without the lock (lh_lock_out) */
	if (size > 1) {
		depth = lh_lock_out();
		ret = MPI_Comm_dup(real, &own);
		lh_lock_back(depth);
		if (ret != MPI_SUCCESS)
			return lh_err(ret);
		mine = lh_new(STS_COMM, LH_HVAL(own));
	}
	depth = lh_lock_out();
	ret = MPI_File_open(real, name, amode, in, &f);
	lh_lock_back(depth);
	if (ret != MPI_SUCCESS) {
		comm_gone(mine);
		return lh_err(ret);
	}
	*fh = lh_new(STS_FILE, LH_HVAL(f));
	s = lh_slot_of(STS_FILE, *fh);
	if (s)   /* no record: the next checkpoint says so (lh_state.c) */
		s->rec = record_file(comm, name, amode);
	if (s && s->rec)
		((struct rec_file *)s->rec)->comm = mine;
	else
		comm_gone(mine);
	return 0;
}

int lh_io_blocking(uint32_t fh)
{
	const struct rec_file *r = rec_of(fh);

	return lh_coll_blocking(r ? r->comm : LH_BLOCKING_NONE);
}

/* a non-blocking collective on the file: counted on its communicator */
int lh_io_enter(uint32_t fh)
{
	const struct rec_file *r = rec_of(fh);

	return r && r->comm != 2 ? lh_coll_enter(r->comm) : 0;
}

/* Split collectives (MPI-3.1 13.4.5): the begin does the whole collective,
 * as the standard allows, behind the entry barrier of the file's
 * blocking collectives, and keeps its status in the file's record for the
 * end, so nothing of it is left in the MPI at a checkpoint. */
enum split_op { READ_AT_ALL, WRITE_AT_ALL, READ_ALL, WRITE_ALL, READ_ORDERED, WRITE_ORDERED };

static int split_begin(uint32_t fh, enum split_op op, sts_offset off, const void *buf, int count,
		       uint32_t datatype)
{
	struct rec_file *r = rec_of(fh);
	MPI_File f = real_file(fh);
	MPI_Datatype t = (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, datatype);
	MPI_Status st = { 0 };
	void *b = (void *)buf;
	int ret;

	if (!r || r->split)   /* one split collective at a time on a file */
		return lh_err(r ? MPI_ERR_OTHER : MPI_ERR_FILE);
	ret = lh_io_blocking(fh);
	if (ret)
		return ret;
	switch (op) {
	case READ_AT_ALL: ret = MPI_File_read_at_all(f, off, b, count, t, &st); break;
	case WRITE_AT_ALL: ret = MPI_File_write_at_all(f, off, buf, count, t, &st); break;
	case READ_ALL: ret = MPI_File_read_all(f, b, count, t, &st); break;
	case WRITE_ALL: ret = MPI_File_write_all(f, buf, count, t, &st); break;
	case READ_ORDERED: ret = MPI_File_read_ordered(f, b, count, t, &st); break;
	default: ret = MPI_File_write_ordered(f, buf, count, t, &st); break;
	}
	if (ret == MPI_SUCCESS) {
		r->split = 1 + (int)op;
		lh_status_out(&st, &r->split_status);
	}
	return lh_err(ret);
}

static int split_end(uint32_t fh, enum split_op op, struct sts_status *status)
{
	struct rec_file *r = rec_of(fh);

	if (!r || r->split != 1 + (int)op)   /* no begin of this kind on it */
		return lh_err(r ? MPI_ERR_OTHER : MPI_ERR_FILE);
	r->split = 0;
	if (status)
		*status = r->split_status;
	return 0;
}

int lh_File_read_at_all_begin(uint32_t fh, sts_offset off, void *buf, int count, uint32_t dt)
{
	return split_begin(fh, READ_AT_ALL, off, buf, count, dt);
}

int lh_File_write_at_all_begin(uint32_t fh, sts_offset off, const void *buf, int count, uint32_t dt)
{
	return split_begin(fh, WRITE_AT_ALL, off, buf, count, dt);
}

int lh_File_read_all_begin(uint32_t fh, void *buf, int count, uint32_t dt)
{
	return split_begin(fh, READ_ALL, 0, buf, count, dt);
}

int lh_File_write_all_begin(uint32_t fh, const void *buf, int count, uint32_t dt)
{
	return split_begin(fh, WRITE_ALL, 0, buf, count, dt);
}

int lh_File_read_ordered_begin(uint32_t fh, void *buf, int count, uint32_t dt)
{
	return split_begin(fh, READ_ORDERED, 0, buf, count, dt);
}

int lh_File_write_ordered_begin(uint32_t fh, const void *buf, int count, uint32_t dt)
{
	return split_begin(fh, WRITE_ORDERED, 0, buf, count, dt);
}

int lh_File_read_at_all_end(uint32_t fh, void *buf, struct sts_status *st)
{
	(void)buf;
	return split_end(fh, READ_AT_ALL, st);
}

int lh_File_write_at_all_end(uint32_t fh, const void *buf, struct sts_status *st)
{
	(void)buf;
	return split_end(fh, WRITE_AT_ALL, st);
}

int lh_File_read_all_end(uint32_t fh, void *buf, struct sts_status *st)
{
	(void)buf;
	return split_end(fh, READ_ALL, st);
}

int lh_File_write_all_end(uint32_t fh, const void *buf, struct sts_status *st)
{
	(void)buf;
	return split_end(fh, WRITE_ALL, st);
}

int lh_File_read_ordered_end(uint32_t fh, void *buf, struct sts_status *st)
{
	(void)buf;
	return split_end(fh, READ_ORDERED, st);
}

int lh_File_write_ordered_end(uint32_t fh, const void *buf, struct sts_status *st)
{
	(void)buf;
	return split_end(fh, WRITE_ORDERED, st);
}

int lh_File_close(uint32_t *fh)
{
	MPI_File f = real_file(*fh);
	const struct rec_file *r = rec_of(*fh);
	uint32_t mine = r ? r->comm : 2;
	unsigned depth;
	int ret = lh_io_blocking(*fh);

	if (ret)
		return ret;
	depth = lh_lock_out();
	ret = MPI_File_close(&f);
	lh_lock_back(depth);
	if (ret == MPI_SUCCESS) {
		*fh = lh_update(STS_FILE, *fh, LH_HVAL(f));
		comm_gone(mine);
	}
	return lh_err(ret);
}

int lh_File_set_view(uint32_t fh, sts_offset disp, uint32_t etype, uint32_t ftype, const char *datarep,
		     uint32_t info)
{
	MPI_Datatype e = (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, etype);
	MPI_Datatype t = (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, ftype);
	MPI_Info in = (MPI_Info)(LH_HCAST)lh_real(STS_INFO, info);
	struct rec_file *r = rec_of(fh);
	MPI_File f;
	unsigned depth;
	int ret = lh_io_blocking(fh);

	if (ret)
		return ret;
	f = real_file(fh);
	depth = lh_lock_out();
	ret = MPI_File_set_view(f, disp, e, t, datarep, in);
	lh_lock_back(depth);
	if (ret != MPI_SUCCESS || !r)
		return lh_err(ret);
	forget_view(r);
	r->viewed = 1;
	r->disp = disp;
	snprintf(r->datarep, sizeof(r->datarep), "%s", datarep);
	r->etype = lh_type_record(e, &r->etype_pre);
	r->ftype = lh_type_record(t, &r->ftype_pre);
	return 0;
}

int lh_File_set_atomicity(uint32_t fh, int flag)
{
	struct rec_file *r = rec_of(fh);
	MPI_File f;
	unsigned depth;
	int ret = lh_io_blocking(fh);

	if (ret)
		return ret;
	f = real_file(fh);
	depth = lh_lock_out();
	ret = MPI_File_set_atomicity(f, flag);
	lh_lock_back(depth);
	if (ret == MPI_SUCCESS && r)
		r->atomic = flag;
	return lh_err(ret);
}

/* At a checkpoint, every rank parked: each open file's individual file
 * pointer. 0, or an MPI error code. */
int lh_io_save(void)
{
	const struct lh_table *t = &lh_lg->tables[STS_FILE];

	for (uint32_t n = STS_FIRST_USER; n < t->next; n++) {
		struct rec_file *r = t->slot[n].rec;
		MPI_Offset pos = 0;
		int ret;

		if (!r || (r->amode & MPI_MODE_SEQUENTIAL))
			continue;
		ret = MPI_File_get_position((MPI_File)(LH_HCAST)t->slot[n].real, &pos);
		if (ret != MPI_SUCCESS)
			return ret;
		r->pos = pos;
		/* every member parked and drained; a restart takes the first
		 * member's (MPICH 4.0's others read 0 after an ordered write) */
		ret = MPI_File_get_position_shared((MPI_File)(LH_HCAST)t->slot[n].real, &pos);
		r->spos = ret == MPI_SUCCESS ? pos : -1;
	}
	return MPI_SUCCESS;
}

/* What of an open file a restart cannot rebuild, or NULL. */
const char *lh_io_unsupported(const void *rec)
{
	const struct rec_file *r = rec;

	for (int i = 0; i < r->n; i++)
		if (r->ranks[i] < 0)
			return "it holds a file opened on a communicator with members outside "
			       "MPI_COMM_WORLD";
	if (r->viewed && ((!r->etype && r->etype_pre == UINT32_MAX) ||
			  (!r->ftype && r->ftype_pre == UINT32_MAX) || lh_type_bad(r->etype) ||
			  lh_type_bad(r->ftype)))
		return "it holds a file whose view uses a datatype Stasis cannot build again";
	return NULL;
}

static int view_type(const void *rec, uint32_t pre, MPI_Datatype *t, int *made)
{
	*made = rec != NULL;
	if (!rec) {
		*t = (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, pre);
		return MPI_SUCCESS;
	}
	return lh_type_build(rec, t);
}

/* The file again on this MPI (restart); 0 or an MPI error code. */
int lh_io_rebuild(struct lh_slot *s)
{
	struct rec_file *r = s->rec;
	long long spos = r->spos;
	MPI_Group wg, g;
	MPI_Comm c;
	MPI_File f;
	int ret;

	/* before MPI_Comm_create_group, which returns on no member before all
	 * called it */
	if (r->ranks[0] == lh_info->world_rank)
		ompio_unstick(r->path);
	MPI_Comm_group(lh_world, &wg);
	ret = MPI_Group_incl(wg, r->n, r->ranks, &g);
	MPI_Group_free(&wg);
	if (ret != MPI_SUCCESS)
		return ret;
	ret = MPI_Comm_create_group(lh_world, g, 0x5355, &c);
	MPI_Group_free(&g);
	if (ret != MPI_SUCCESS)
		return ret;
	/* it exists now: creating it again would fail (EXCL) or do nothing */
	ret = MPI_File_open(c, r->path, r->amode & ~(MPI_MODE_CREATE | MPI_MODE_EXCL), MPI_INFO_NULL, &f);
	if (ret == MPI_SUCCESS)   /* the first member's shared pointer, for all */
		ret = MPI_Bcast(&spos, 1, MPI_LONG_LONG, 0, c);
	MPI_Comm_free(&c);
	if (ret != MPI_SUCCESS)
		return ret;
	if (r->viewed) {
		MPI_Datatype e, t;
		int me = 0, mt = 0;

		ret = view_type(r->etype, r->etype_pre, &e, &me);
		if (ret == MPI_SUCCESS) {
			ret = view_type(r->ftype, r->ftype_pre, &t, &mt);
			if (ret == MPI_SUCCESS) {
				ret = MPI_File_set_view(f, r->disp, e, t, r->datarep, MPI_INFO_NULL);
				if (mt)
					MPI_Type_free(&t);
			}
			if (me)
				MPI_Type_free(&e);
		}
	}
	if (ret == MPI_SUCCESS && r->atomic)
		ret = MPI_File_set_atomicity(f, 1);
	if (ret == MPI_SUCCESS && !(r->amode & MPI_MODE_SEQUENTIAL))
		ret = MPI_File_seek(f, r->pos, MPI_SEEK_SET);
	r->spos = spos;
	if (ret == MPI_SUCCESS && spos >= 0)   /* collective: on all members or none */
		ret = MPI_File_seek_shared(f, spos, MPI_SEEK_SET);
	if (ret != MPI_SUCCESS) {
		MPI_File_close(&f);
		return ret;
	}
	s->real = LH_HVAL(f);
	return MPI_SUCCESS;
}
