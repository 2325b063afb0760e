/* level_global.c - GLOBAL: each member's file copied from its node's cache
 * into the global tier's annex of the checkpoint (also the flush that any
 * level may add). Recovery looks in the nodes' caches first, like SINGLE;
 * the global copy is engine.c's last resort, the most expensive place. */
#include "redundancy/level.h"
#include "common/err.h"
#include "common/fault.h"
#include "store/store.h"

#include <errno.h>
#include <stdio.h>

static int global_apply(const struct redun_set *set, const struct redun_comm *c,
			struct store_ckpt *lc, int *degraded)
{
	char file[32];
	struct store_ckpt *gc = NULL;
	struct store_file *f = NULL;
	struct store_io *in = NULL;
	char *buf = redun_xfer_get();
	uint64_t size = 0;
	int ret;

	(void)lc;
	*degraded = 0;
	redun_name(file, REDUN_FILE, redun_rank(c));
	ret = buf ? 0 : err_set(-ENOMEM, "out of memory");
	ret = ret ? ret : set->global ? 0 : err_set(-EINVAL, "%s: no global tier", set->ckpt);
	if (!ret && store_io_open(set->local, set->ckpt, file, &in))
		ret = err_set(-ENOENT, "%s: cannot read it to copy to the global tier", err_msg());
	ret = ret ? ret : store_ckpt_annex(set->global, set->ckpt, &gc);
	ret = ret ? ret : store_file_create(gc, file, &f);
	size = in ? store_io_size(in) : 0;
	for (uint64_t off = 0; !ret && off < size;) {
		size_t n = size - off < XFER_PIECE ? (size_t)(size - off) : XFER_PIECE, room_len;
		void *room;
		/* read straight into the global file's stage where it has one:
		 * one copy of the bytes less */
		int staged = store_file_room(f, &room, &room_len) == 0;

		if (staged && room_len < n)
			n = room_len;
		/* the fault point: a copy cut off before its last piece */
		ret = off + n >= size ? FAULT(REDUN_GLOBAL_COPY) : 0;
		ret = ret ? ret : store_io_read(in, staged ? room : buf, n, off);
		ret = ret ? ret : staged ? store_file_done(f, n) : store_file_write(f, buf, n);
		off += n;
	}
	ret = ret ? ret : store_file_commit(f);
	store_file_free(&f);
	store_ckpt_free(&gc);
	store_io_close(&in);
	redun_xfer_put(buf);
	return ret;
}

const struct redun_level redun_level_global = {
	.name = "global",
	.apply = global_apply,
	.recover = redun_recover_moved,
};
