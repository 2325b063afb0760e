/* node_copy.c - the node agent's copy of a staged image into the global
 * tier (node.h). The copy may start while the rank still writes the image
 * (the agent asks at WRITE): it reads the image's *.tmp as it grows, in
 * pieces of up to 4 MiB, and checks every piece as it passes (a checked
 * copy, redun_ccopy, shared with libstasis's level global: img_scan_feed
 * underneath): each chunk's CRC32C, and the header's, the manifest's
 * and the footer's, are checked on the bytes copied, so what reaches the
 * global tier is what was checked, and the image is read once. Once the
 * image is committed and copied to its last byte, every chunk its manifest
 * names must be one that passed. The copy is written as *.tmp and
 * committed (fsync, rename, ANNEX record) only when every byte was copied
 * and checked and the checkpoint is sealed. With stage_compress the image
 * goes through img_recompress instead (image.h), once it is committed,
 * which checks every chunk's CRC on what it read as well.
 */
#include "node/node.h"

#include "common/config.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "image/image.h"
#include "redundancy/redundancy.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COPY_BUF (4u << 20)
#define FOLLOW_NAP_US 2000           /* its writer's next bytes, or the verdict */

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The node agent's fault points, on each payload a compressed copy reads */
static int copy_faults(void *ctx, void *payload, size_t len)
{
	int ret = FAULT(NODE_COPY);

	(void)ctx;
	if (ret)
		return err_set(ret, "fault point node.copy");
	if (len && FAULT(NODE_COPY_CORRUPT))
		((unsigned char *)payload)[len / 2] ^= 0x20;
	return 0;
}

/* stage_compress: the image open as fd (held: its name may go meanwhile)
 * re-encoded on its way (img_recompress checks every chunk's CRC on what
 * it read) */
static int copy_compressed(struct store_file *f, const char *local_path, int fd, int level)
{
	struct img_recompress_opts o = { .level = (unsigned)level, .hook = copy_faults };

	return img_recompress_fd(fd, local_path, &o, store_file_write, f, NULL);
}

/* Whether the image being written at path, open as fd, is committed: 1
 * once its *.tmp is gone and path is that file (its size is then final),
 * 0 while it is written, -1 when it went without a commit (its writer
 * failed) */
static int committed(const char *path, const char *tmp, int fd)
{
	struct stat a, b;

	if (stat(tmp, &a) == 0 || errno != ENOENT)
		return 0;
	if (stat(path, &a) != 0 || fstat(fd, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
		return -1;
	return 1;
}

/* The checkpoint's verdict, waited for by a copy that follows its image
 * (w NULL: the image is committed and the checkpoint sealed) */
static int verdict(const struct node_copy_wait *w)
{
	return w ? w->verdict(w->arg) : 1;
}

static int cancelled(const char *path)
{
	return err_set(-ECANCELED, "%s: its checkpoint failed", path);
}

/* Read locked, fd is still the file at path or tmp: the node agent
 * retires older images into spares that later ones are written over
 * (store_file_retire, node_level_verdict), never one whose lock a copy
 * holds; one retired between the open and the lock has lost its name
 * (gone, as if removed) */
static int held(int fd, const char *path, const char *tmp)
{
	struct stat a, b;

	while (flock(fd, LOCK_SH) != 0)
		if (errno != EINTR)
			return 1;       /* no locks there: no spares either */
	return fstat(fd, &a) == 0 &&
	       ((stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) ||
		(tmp && stat(tmp, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev));
}

/* The image at path, or its *.tmp while it is written (w) */
static int open_image(const char *path, const char *tmp, const struct node_copy_wait *w, int *fd)
{
	for (;;) {
		int v = verdict(w);   /* before the opens: sealed, the file is there */

		*fd = w ? open(tmp, O_RDONLY | O_CLOEXEC) : -1;
		if (*fd < 0)
			*fd = open(path, O_RDONLY | O_CLOEXEC);
		if (*fd >= 0 && !held(*fd, path, w ? tmp : NULL)) {
			close(*fd);
			*fd = -1;
			errno = ENOENT;
		}
		if (*fd >= 0)
			return 0;
		if (errno != ENOENT || v > 0)
			return err_set(-errno, "cannot read %s: %s", path, strerror(errno));
		if (v < 0)
			return cancelled(path);
		usleep(FOLLOW_NAP_US);
	}
}

/* The node agent's fault points on each piece of a plain copy: after its
 * read, before its check (redun_ccopy_to) */
static int piece_faults(void *ctx, void *piece, size_t len, int last)
{
	int ret = FAULT(NODE_COPY);

	(void)ctx;
	(void)last;
	if (ret)
		return err_set(ret, "fault point node.copy");
	if (FAULT(NODE_COPY_CORRUPT))
		((unsigned char *)piece)[len / 2] ^= 0x20;   /* as a bad page of the RAM disk would */
	return 0;
}

/* The bytes of the image open as fd, into f, as they are written: each
 * piece read is checked and written (redun_ccopy); the end is the file
 * committed and copied to its last byte */
static int copy_plain(struct store_file *f, const char *path, const char *tmp, int fd,
		      const struct node_copy_wait *w, uint64_t *copied)
{
	struct redun_ccopy *cc = NULL;
	int ret = redun_ccopy_create(fd, path, f, &cc);

	while (!ret) {
		int done = w ? committed(path, tmp, fd) : 1;   /* before the size: then final */
		/* written over a spare, its length is the spare's: the mark */
		uint64_t off = redun_ccopy_copied(cc), size = store_fd_written("local", fd), have;

		have = size > off ? size - off : 0;
		/* while it is written: whole pieces only, so that the pieces (and
		 * the fault points' counts) are those of a copy after the seal */
		if (have && (done > 0 || have >= COPY_BUF)) {
			if (done <= 0)
				have -= have % COPY_BUF;
			ret = redun_ccopy_to(cc, off + have, COPY_BUF, done > 0, piece_faults, NULL);
			continue;
		}
		if (done > 0)
			break;
		if (done < 0)
			ret = verdict(w) < 0 ? cancelled(path) :
			      err_set(-EIO, "%s: removed while it was written", path);
		else if (verdict(w) < 0)
			ret = cancelled(path);
		else
			usleep(FOLLOW_NAP_US);
	}
	ret = ret ? ret : redun_ccopy_end(cc);
	*copied = cc ? redun_ccopy_copied(cc) : 0;
	redun_ccopy_free(&cc);
	return ret;
}

int node_copy_image(struct store *global, const char *local_path, const char *name,
		    const char *file, const struct node_copy_wait *w)
{
	int level = cfg_stage_level(cfg_str(CFG_STAGE_COMPRESS));
	struct store_ckpt *ck = NULL;
	struct store_file *f = NULL;
	char tmp[PATH_MAX + 8];
	uint64_t copied = 0, t0 = mono_ms(), t_open, t_copy, t_seal;
	int fd = -1, v = 1, ret;

	snprintf(tmp, sizeof(tmp), "%s.tmp", local_path);
	/* compressed, the image is read whole: once it is committed */
	while (level > 0 && (v = verdict(w)) == 0)
		usleep(FOLLOW_NAP_US);
	ret = level > 0 && v < 0 ? cancelled(local_path) : 0;
	/* compressed too, held (read locked) while it is read: a retirement
	 * (cache_keep) would otherwise make it a spare the next image is
	 * written over under the copy */
	ret = ret ? ret : open_image(local_path, tmp, level > 0 ? NULL : w, &fd);
	t_open = mono_ms();
	/* followed, the copy's *.tmp grows in the begun checkpoint; it
	 * commits only once the checkpoint is sealed */
	ret = ret ? ret : w ? store_ckpt_annex_early(global, name, &ck) :
			    store_ckpt_annex(global, name, &ck);
	ret = ret ? ret : store_file_create(ck, file, &f);
	if (!ret && level > 0)
		ret = copy_compressed(f, local_path, fd, level);
	else if (!ret)
		ret = copy_plain(f, local_path, tmp, fd, w, &copied);
	t_copy = mono_ms();
	while (!ret && (v = verdict(w)) == 0)
		usleep(FOLLOW_NAP_US);
	ret = ret ? ret : v < 0 ? cancelled(local_path) : 0;
	if (!ret && (ret = FAULT(NODE_COPY_COMMIT)))
		ret = err_set(ret, "fault point node.copy.commit");
	t_seal = mono_ms();
	ret = ret ? ret : store_file_commit(f);
	if (!ret)
		log_info("%s: in the global tier after %llu ms (%llu MiB; opened after %llu ms, "
			 "copied %llu ms, then the seal awaited %llu ms, the commit %llu ms)",
			 local_path, (unsigned long long)(mono_ms() - t0),
			 (unsigned long long)(copied >> 20), (unsigned long long)(t_open - t0),
			 (unsigned long long)(t_copy - t_open), (unsigned long long)(t_seal - t_copy),
			 (unsigned long long)(mono_ms() - t_seal));
	if (fd >= 0)
		close(fd);
	store_file_free(&f);   /* uncommitted: its *.tmp goes */
	store_ckpt_free(&ck);
	return ret;
}
