/* split_convert.c - split images of versions 4 and 5 read as version 6's
 * (split_format.h).
 *
 * Versions 4 and 5 kept a rank's threads, signal handlers and regions in
 * records of their own; version 6 writes the process records every image
 * has (pimg_format.h). Rather than keep a second reader, an old split
 * section is turned into the two sections of version 6 when it is loaded,
 * and everything after that reads one format. Plain C, no MPI: the lower
 * halves, `stasis inspect --decode` and tests/unit/test_split_convert.c
 * use it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "split/split_format.h"

void split_thread_to_rec(const struct split_thread *t, struct pimg_rec_thread *rec)
{
	memset(rec, 0, sizeof(*rec));
	rec->tid = t->tid;
	rec->flags = t->main ? PIMG_THREAD_MAIN : 0;
	rec->fs_base = t->fs;
	rec->sigframe = t->frame;
	rec->robust_head = t->robust_head;
	rec->robust_len = t->robust_len;
	rec->sigpending = t->pending;
}

void split_region_kind(uint32_t old_flags, uint32_t *kind, uint32_t *flags)
{
	int shared = (old_flags & SPLIT_SHARED) != 0;

	*flags = 0;
	if (old_flags & SPLIT_SEGMENT) {
		/* the owner's image holds every page, as of shared memory;
		 * the others' none, as of a shared file */
		*kind = (old_flags & SPLIT_SEG_OWNER) ? PIMG_SHARED_ANON : PIMG_FILE_SHARED;
		*flags = PIMG_F_SEGMENT | ((old_flags & SPLIT_SEG_OWNER) ? PIMG_F_SEG_OWNER : 0);
	} else if (old_flags & SPLIT_FILE) {
		*kind = shared ? PIMG_FILE_SHARED : PIMG_FILE_PRIVATE;
	} else {
		*kind = shared ? PIMG_SHARED_ANON : PIMG_ANON;
	}
}

/* The converted section grows in a memory stream (open_memstream). */
static int put(FILE *out, const void *p, size_t n)
{
	return fwrite(p, 1, n, out) == n ? 0 : err_set(-ENOMEM, "out of memory");
}

struct cursor {
	const unsigned char *p;
	size_t left;
};

static const void *take(struct cursor *c, size_t n)
{
	const void *p = c->p;

	if (c->left < n)
		return NULL;
	c->p += n;
	c->left -= n;
	return p;
}

static int convert_regions(struct cursor *c, uint32_t nregions, FILE *out)
{
	for (uint32_t i = 0; i < nregions; i++) {
		struct split_region r;
		struct pimg_rec_region rec = { 0 };
		const void *src = take(c, sizeof(r));
		const char *path;
		const unsigned char *runs;
		uint64_t nruns;
		int ret;

		if (!src)
			return err_set(-EBADMSG, "the split section is truncated");
		memcpy(&r, src, sizeof(r));
		path = take(c, r.path_len);
		runs = take(c, (size_t)r.nruns * sizeof(struct split_run));
		if (!path || !runs || r.path_len == 0 || path[r.path_len - 1] != 0)
			return err_set(-EBADMSG, "bad region record %u", i);
		rec.start = r.start;
		rec.end = r.end;
		rec.file_offset = r.file_offset;
		rec.prot = r.prot;
		split_region_kind(r.flags, &rec.kind, &rec.flags);
		rec.path_len = r.path_len;
		rec.file_size = r.file_size;
		rec.file_mtime_ns = r.file_mtime_ns;
		rec.file_ino = r.file_ino;
		for (uint32_t k = 0; k < r.nruns; k++) {
			struct split_run run;

			memcpy(&run, runs + k * sizeof(run), sizeof(run));
			rec.stored_pages += run.npages;
		}
		nruns = r.nruns;
		ret = put(out, &rec, sizeof(rec));
		ret = ret ? ret : put(out, path, r.path_len);
		ret = ret ? ret : put(out, &nruns, sizeof(nruns));
		/* struct split_run and pimg_rec_run are the same two words */
		ret = ret ? ret : put(out, runs, (size_t)r.nruns * sizeof(struct split_run));
		if (ret)
			return ret;
	}
	return 0;
}

int split_convert(const void *old, size_t len, void **process, size_t *process_len,
		  struct split_info *info)
{
	struct cursor c = { old, len };
	struct pimg_rec_sigaction sa[PIMG_NSIG];
	struct pimg_rec_header h = { 0 };
	struct split_header sh;
	char *mem = NULL;
	size_t mem_len = 0;
	FILE *out;
	const unsigned char *threads, *sigs;
	const void *p = take(&c, sizeof(sh));
	int ret = 0;

	_Static_assert(sizeof(struct split_run) == sizeof(struct pimg_rec_run), "runs differ");
	*process = NULL;
	*process_len = 0;
	if (!p)
		return err_set(-EBADMSG, "the split section is truncated");
	memcpy(&sh, p, sizeof(sh));
	if (sh.version < SPLIT_FORMAT_OLDEST || sh.version >= 6)
		return err_set(-EBADMSG, "split format version %u is not converted", sh.version);
	memset(info, 0, sizeof(*info));
	info->version = sh.version;
	info->rank = sh.rank;
	info->size = sh.size;
	info->tid_offset = sh.tid_offset;
	info->uh_callbacks = sh.uh_callbacks;
	info->restarts = sh.restarts;
	out = open_memstream(&mem, &mem_len);
	if (!out)
		return err_set(-ENOMEM, "out of memory");
	h.version = PIMG_FORMAT_VERSION;
	h.nthreads = sh.nthreads;
	h.nregions = sh.nregions;
	h.vdso_start = sh.vdso;
	h.shared_pending = sh.shared_pending;
	h.cwd_len = 2;   /* unknown cwd and executable: two empty strings */
	ret = put(out, &h, sizeof(h));
	ret = ret ? ret : put(out, "\0", 2);
	threads = take(&c, (size_t)sh.nthreads * sizeof(struct split_thread));
	sigs = take(&c, (size_t)sh.nsigs * sizeof(struct split_sigaction));
	if (!ret && (!threads || !sigs))
		ret = err_set(-EBADMSG, "the split section is truncated");
	memset(sa, 0, sizeof(sa));
	for (uint32_t i = 0; !ret && i < sh.nsigs; i++) {
		struct split_sigaction a;

		memcpy(&a, sigs + i * sizeof(a), sizeof(a));
		if (a.signo < 1 || a.signo > PIMG_NSIG)
			ret = err_set(-EBADMSG, "bad signal number %u", a.signo);
		else
			sa[a.signo - 1] = (struct pimg_rec_sigaction){ a.handler, a.flags, a.restorer,
								       a.mask };
	}
	ret = ret ? ret : put(out, sa, sizeof(sa));
	for (uint32_t i = 0; !ret && i < sh.nthreads; i++) {
		struct split_thread st;
		struct pimg_rec_thread rec;

		memcpy(&st, threads + i * sizeof(st), sizeof(st));
		split_thread_to_rec(&st, &rec);
		ret = put(out, &rec, sizeof(rec));
	}
	ret = ret ? ret : convert_regions(&c, sh.nregions, out);
	if (!ret && c.left)
		ret = err_set(-EBADMSG, "the split section has %zu bytes after its records", c.left);
	if (fclose(out) != 0 && !ret)
		ret = err_set(-ENOMEM, "out of memory");
	if (ret) {
		free(mem);
		return ret;
	}
	*process = mem;
	*process_len = mem_len;
	return 0;
}
