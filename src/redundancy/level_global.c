/* level_global.c - GLOBAL: each member's file copied from its node's cache
 * into the global tier's annex of the checkpoint (also the flush that any
 * level may add), every checksum of the image checked on the bytes copied
 * (redun_ccopy). The copy may follow the file while it is written (the
 * level's stream): all but its last piece then moves during the write, and
 * the upgrade copies that piece, checks the whole and commits. Recovery
 * looks in the nodes' caches first, like SINGLE; the global copy is
 * engine.c's last resort, the most expensive place. */
#include "redundancy/level.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* Pieces of the copy: two fill the global file's 8 MiB stage, whose full
 * stages go to the disk while the next fills */
#define GLOBAL_PIECE (4u << 20)

/* The copy of this member's file: begun by the stream, or by apply */
struct global_stream {
	struct redun_stream base;
	struct store_ckpt *gc;          /* the checkpoint's annex in the global tier */
	struct store_file *f;           /* the copy, uncommitted */
	struct store_io *in;            /* this member's file */
	struct redun_ccopy *copy;
	int ret;                        /* the first error of the copy */
};

static void global_stream_free(struct redun_stream *s)
{
	struct global_stream *st = (struct global_stream *)s;

	redun_ccopy_free(&st->copy);
	store_file_free(&st->f);        /* uncommitted: its *.tmp goes */
	store_ckpt_free(&st->gc);
	store_io_close(&st->in);
	free(st);
}

static struct global_stream *stream_new(void)
{
	struct global_stream *st = calloc(1, sizeof(*st));

	if (st)
		st->base = (struct redun_stream){ &redun_level_global, global_stream_free };
	else
		err_set(-ENOMEM, "out of memory");
	return st;
}

/* The copy's file in the global tier (early: the checkpoint not sealed
 * yet), and the checked copy into it from st->in */
static int copy_open(const struct redun_set *set, struct global_stream *st, const char *file,
		     int early)
{
	int ret = set->global ? 0 : err_set(-EINVAL, "%s: no global tier", set->ckpt);

	ret = ret ? ret : early ? store_ckpt_annex_early(set->global, set->ckpt, &st->gc) :
			  store_ckpt_annex(set->global, set->ckpt, &st->gc);
	ret = ret ? ret : store_file_create(st->gc, file, &st->f);
	return ret ? ret : redun_ccopy_create(store_io_fd(st->in), store_io_path(st->in), st->f,
					      &st->copy);
}

/* How far this member's file is written: 1 once it is committed (*bytes
 * then its size), 0 while it is written, negative when its write failed */
static int source_state(const struct redun_set *set, const struct global_stream *st,
			uint64_t *bytes)
{
	int done;

	if (set->written)
		return set->written(set->written_arg, bytes);
	done = store_io_committed(st->in);      /* before the size: then final */
	*bytes = store_io_size(st->in);
	return done;
}

/* Follow this member's file while it is written, copying every whole
 * piece but the last; returns once the file is committed, its write
 * failed, or abort(arg) says the checkpoint did */
static int global_stream(const struct redun_set *set, const struct redun_comm *c,
			 int (*abort)(void *arg), void *arg, struct redun_stream **out)
{
	struct global_stream *st = stream_new();
	long idle = REDUN_STREAM_IDLE_NS;
	char file[32];
	int ret = st ? 0 : -ENOMEM, done = 0;

	*out = NULL;
	redun_name(file, REDUN_FILE, redun_rank(c));
	while (!ret && !done) {
		uint64_t bytes = 0, off = st->copy ? redun_ccopy_copied(st->copy) : 0, upto = off;

		if (abort(arg)) {
			ret = err_set(-ECANCELED, "%s: the checkpoint failed", set->ckpt);
			break;
		}
		if (!st->in)
			ret = store_io_open_writing(set->local, set->ckpt, file, &st->in);
		if (ret == -ENOENT) {           /* not begun yet */
			ret = 0;
			redun_stream_idle(&idle, 8 * REDUN_STREAM_IDLE_NS);
			continue;
		}
		if (!ret && !st->copy)
			ret = copy_open(set, st, file, 1);
		done = ret ? 0 : source_state(set, st, &bytes);
		if (done < 0)                   /* its checkpoint fails: abort will say */
			done = 0, bytes = 0;
		/* whole pieces, and never the last: the upgrade copies it once
		 * the checkpoint is established (the fault point is there) */
		if (bytes > off + GLOBAL_PIECE)
			upto = off + (bytes - off - 1) / GLOBAL_PIECE * GLOBAL_PIECE;
		if (!ret && upto > off) {
			ret = redun_ccopy_to(st->copy, upto, GLOBAL_PIECE, 0, NULL, NULL);
			idle = REDUN_STREAM_IDLE_NS;
		} else if (!ret && !done) {
			redun_stream_idle(&idle, 8 * REDUN_STREAM_IDLE_NS);
		}
	}
	if (ret == -ECANCELED || ret == -ENOMEM) {
		if (st)
			global_stream_free(&st->base);
		return ret;
	}
	/* any other error is the copy's: apply reports it, in the agreement */
	st->ret = ret;
	*out = &st->base;
	return 0;
}

/* The fault point: a copy cut off before its last piece */
static int last_piece(void *arg, void *piece, size_t len, int last)
{
	(void)arg;
	(void)piece;
	(void)len;
	return last ? FAULT(REDUN_GLOBAL_COPY) : 0;
}

static int global_apply(const struct redun_set *set, const struct redun_comm *c,
			struct store_ckpt *lc, int *degraded)
{
	struct global_stream *st = set->stream && set->stream->level == &redun_level_global ?
				   (struct global_stream *)set->stream : NULL;
	struct global_stream *own = st ? NULL : stream_new();
	char file[32];
	int ret = st || own ? 0 : -ENOMEM;

	(void)lc;
	*degraded = 0;
	redun_name(file, REDUN_FILE, redun_rank(c));
	if (own) {
		st = own;
		if (store_io_open(set->local, set->ckpt, file, &st->in))
			ret = err_set(-ENOENT, "%s: cannot read it to copy to the global tier",
				      err_msg());
		ret = ret ? ret : copy_open(set, st, file, 0);
	}
	ret = ret ? ret : st->ret;
	if (!ret && !own)
		log_debug("rank %d: %s: %llu of %llu bytes copied to the global tier while written",
			  redun_rank(c), set->ckpt, (unsigned long long)redun_ccopy_copied(st->copy),
			  (unsigned long long)store_io_size(st->in));
	/* the file is committed and sealed: its size is final */
	ret = ret ? ret : redun_ccopy_to(st->copy, store_io_size(st->in), GLOBAL_PIECE, 1,
					 last_piece, NULL);
	ret = ret ? ret : redun_ccopy_end(st->copy);
	ret = ret ? ret : store_file_commit(st->f);
	if (own)
		global_stream_free(&own->base);
	return ret;
}

const struct redun_level redun_level_global = {
	.name = "global",
	.apply = global_apply,
	.recover = redun_recover_moved,
	.stream = global_stream,
};
