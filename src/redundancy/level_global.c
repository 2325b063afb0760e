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
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Pieces of a copy from the mapped cache file: a direct write each, as
 * large as the store's stages */
#define GLOBAL_PIECE (8u << 20)

/* The CRC the store recorded for this member's file in the cache: the
 * copy's record takes it over (its bytes are not read to compute one);
 * 0 if there is none (then the commit reads the copy back for it) */
static int source_crc(const struct redun_set *set, const char *file, uint64_t size, uint32_t *crc)
{
	struct store_file_info *files = NULL;
	size_t n = 0;
	int found = 0;

	if (store_ckpt_files(set->local, set->ckpt, &files, &n) == 0)
		for (size_t i = 0; i < n && !found; i++)
			if (!strcmp(files[i].name, file) && files[i].size == size) {
				*crc = files[i].crc;
				found = 1;
			}
	free(files);
	return found;
}

/* One piece of the copy at off: straight from the mapped cache file to the
 * disk (direct I/O from the cache's own pages: no copy into a buffer, no
 * CRC pass) where the global file takes it; else read into its stage, or
 * buf, and written as usual. Only the kernel touches the mapping: a file
 * cut meanwhile fails the write (-EFAULT) instead of raising SIGBUS in the
 * process. map is NULL when the file could not be mapped. */
static int copy_piece(struct store_file *f, struct store_io *in, const char *map, char *buf,
		      uint64_t off, size_t n)
{
	size_t room_len, m;
	void *room;
	int ret = map ? store_file_write_direct(f, map + off, n) : -EOPNOTSUPP;

	if (ret != -EOPNOTSUPP)
		return ret;
	for (size_t done = 0; done < n; done += m) {
		m = n - done < XFER_PIECE ? n - done : XFER_PIECE;
		if (store_file_room(f, &room, &room_len) == 0 && room_len >= m)
			ret = store_io_read(in, room, m, off + done) ?: store_file_done(f, m);
		else
			ret = store_io_read(in, buf, m, off + done) ?: store_file_write(f, buf, m);
		if (ret)
			return ret;
	}
	return 0;
}

static int global_apply(const struct redun_set *set, const struct redun_comm *c,
			struct store_ckpt *lc, int *degraded)
{
	char file[32];
	struct store_ckpt *gc = NULL;
	struct store_file *f = NULL;
	struct store_io *in = NULL;
	char *buf = redun_xfer_get(), *map = NULL;
	uint64_t size = 0;
	uint32_t crc = 0;
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
	/* committed and sealed, its size final: nothing cuts it while mapped
	 * (were it cut, the direct write would fail, see copy_piece) */
	if (!ret && size && source_crc(set, file, size, &crc)) {
		map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, store_io_fd(in), 0);
		if (map == MAP_FAILED)
			map = NULL;
		else
			store_file_vouch(f, crc);
	}
	for (uint64_t off = 0, piece = map ? GLOBAL_PIECE : XFER_PIECE; !ret && off < size;) {
		size_t n = size - off < piece ? (size_t)(size - off) : (size_t)piece;

		/* the fault point: a copy cut off before its last piece */
		ret = off + n >= size ? FAULT(REDUN_GLOBAL_COPY) : 0;
		ret = ret ? ret : copy_piece(f, in, map, buf, off, n);
		off += n;
	}
	ret = ret ? ret : store_file_commit(f);
	if (map)
		munmap(map, (size_t)size);
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
