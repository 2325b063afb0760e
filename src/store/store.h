/* store.h - the checkpoint store: where checkpoints live and how they commit.
 *
 * Layout: <root>/<job>/index, <root>/<job>/<checkpoint>/<files>. A checkpoint
 * is a directory of files (one image per rank, routed files, ...) written by
 * one or many processes. The store does not know what produced the files.
 *
 * Commit protocol (docs/store.md): a file is written as <name>.tmp, fsynced,
 * renamed to <name>, the directory fsynced, then a FILE record is appended to
 * the job's index; when every file is there, a COMPLETE record is appended.
 * The index is append-only, each record checksummed, and survives a crash at
 * any byte: a torn or damaged record is skipped, never trusted. Restart
 * selection (store_select) walks back from the newest COMPLETE checkpoint and
 * never returns a partial one.
 *
 * A storage tier (a directory on node-local storage or the global file system)
 * is a table of operations chosen by name: "local" and "global" now.
 *
 * All functions return 0 or a negative errno, with a one-line message in
 * err_msg() (common/err.h) on failure.
 */
#ifndef STASIS_STORE_STORE_H
#define STASIS_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

struct store;
struct store_ckpt;
struct store_file;

/* Open (creating if needed) the store of one job.
 * in: tier ("local" or "global"; NULL: config `tier`), root (NULL: the tier's
 *     configured directory), job (a plain name, no '/').
 * out: *out, freed with store_close(). */
int store_open(const char *tier, const char *root, const char *job, struct store **out);
void store_close(struct store **s);

/* The job directory, <root>/<job>. */
const char *store_job_dir(const struct store *s);

/* Names of the jobs under root (directories holding an index), sorted.
 * out: *names (array and strings malloc'd: free with store_names_free). */
int store_jobs(const char *tier, const char *root, char ***names, size_t *count);
void store_names_free(char **names, size_t count);

/* Begin a new checkpoint: the next name (ckpt-000001, ...), its directory and
 * a BEGIN record. Safe against other processes beginning at the same time. */
int store_ckpt_begin(struct store *s, struct store_ckpt **out);
/* Begin the checkpoint `name` (chosen elsewhere, e.g. by rank 0 in the
 * global tier, so every tier uses the same name), or join it if another
 * process began it; -EEXIST if it is already sealed. */
int store_ckpt_begin_named(struct store *s, const char *name, struct store_ckpt **out);
/* Join a begun checkpoint by name to add files to it (another rank). */
int store_ckpt_join(struct store *s, const char *name, struct store_ckpt **out);
/* The same for a caller that knows the checkpoint is begun and not sealed
 * (its coordinator just said CHECKPOINT <name>): checks only its directory,
 * where store_ckpt_join reads the whole index (every rank of a job doing
 * so is quadratic in the ranks: docs/scale.md). -ENOENT without it. */
int store_ckpt_join_begun(struct store *s, const char *name, struct store_ckpt **out);
const char *store_ckpt_name(const struct store_ckpt *c);
/* Two checkpoint names in the order they were made: by their number
 * (ckpt-999999 before ckpt-1000000, where strcmp puts it after, past the
 * six digits of the padding), then by strcmp; a name without a number
 * (not ckpt-<digits>) before every numbered one. <0, 0, >0 as strcmp. */
int store_ckpt_name_cmp(const char *a, const char *b);
/* Seal it: if every one of `expected` files (0: at least one) has a FILE
 * record and is present with its recorded size, append COMPLETE; otherwise
 * append FAILED and return -EIO naming what is missing. */
int store_ckpt_commit(struct store_ckpt *c, unsigned expected);
/* Append FAILED with a reason (a rank reported an error, a fault fired). */
int store_ckpt_abort(struct store_ckpt *c, const char *reason);
void store_ckpt_free(struct store_ckpt **c);

/* The annex of a COMPLETE checkpoint: redundancy added after it was sealed
 * (a partner's copy, parity, the flush to another tier). Files created
 * through an annex handle commit like any other but under ANNEX records,
 * which never replace a file the checkpoint was sealed with; a crash half-way
 * leaves the checkpoint exactly as it was sealed. -EINVAL if the checkpoint
 * is not COMPLETE. */
int store_ckpt_annex(struct store *s, const char *name, struct store_ckpt **out);
/* The same for a checkpoint still being written (begun, its directory
 * there, not sealed yet): its annex files can be created and written at
 * once (a partner copy sent while the images are written), but
 * store_file_commit takes them only once the checkpoint is COMPLETE
 * (-EINVAL before); store_file_free removes an uncommitted one. */
int store_ckpt_annex_early(struct store *s, const char *name, struct store_ckpt **out);
/* Record how far a COMPLETE checkpoint's redundancy got: `level` reached, or
 * (reason != NULL) the level it stays at and why the rest failed. */
int store_ckpt_level(struct store *s, const char *name, const char *level, const char *reason);

/* Files of a checkpoint: create <name>.tmp, write, commit (fsync, rename,
 * fsync the directory, FILE record with size and CRC32C of the content).
 * store_file_write has the signature of an image sink (image.h). */
int store_file_create(struct store_ckpt *c, const char *name, struct store_file **out);
int store_file_write(void *file, const void *buf, size_t len);
/* The same with the bytes' CRC-32C known to the caller (an image writer's
 * chunk payload): the file's CRC is combined from it, not read again. The
 * signature of an image writer's img_sink_crc_fn. */
int store_file_write_crc(void *file, const void *buf, size_t len, uint32_t crc);
int store_file_commit(struct store_file *f);
/* Commit a file someone else wrote as <name>.tmp in the checkpoint's
 * directory (store_ckpt_path gives where): read back for its size and CRC,
 * then the same fsync, rename, fsync and FILE record as store_file_commit. */
int store_file_adopt(struct store_ckpt *c, const char *name);
/* Free; an uncommitted file's *.tmp is removed. Sets *f to NULL. */
void store_file_free(struct store_file **f);
/* Bytes put into the file by the caller (a transport splicing a socket
 * into it: no copy through a buffer). store_file_fd: the descriptor to
 * write at offset *size (the bytes so far), or -EOPNOTSUPP when the file
 * is written through a staging buffer (then store_file_write);
 * store_file_wrote: len bytes more are there, or the write failed (err <
 * 0: the file cannot commit). The commit reads such a file back for its
 * CRC, unless store_file_vouch gave it: the CRC of the whole content as its
 * source recorded it (a copy's). A file written only by store_file_write
 * and vouched for commits only if its CRC is the one vouched. */
int store_file_fd(struct store_file *f, uint64_t *size);
int store_file_wrote(struct store_file *f, uint64_t len, int err);
void store_file_vouch(struct store_file *f, uint32_t crc);
/* Bytes read straight into the file's staging buffer (a copy from another
 * file: no copy through the caller's buffer). store_file_room: the free
 * part of the stage (*buf, *len >= 1 bytes, valid until the next call on
 * f), or -EOPNOTSUPP when the file is not staged (then store_file_write);
 * store_file_done: the n <= *len bytes put there, taken as
 * store_file_write takes bytes (size, CRC, the fault point). */
int store_file_room(struct store_file *f, void **buf, size_t *len);
int store_file_done(struct store_file *f, size_t n);
/* Bytes written from the caller's memory straight to the disk (direct
 * I/O, no copy into the stage, no CRC pass: a copy from a mapped file):
 * only for a file staged for direct I/O with nothing in its stage, buf,
 * len and the file's size multiples of 4096 (STORE_DIRECT_ALIGN); -EOPNOTSUPP
 * otherwise (then store_file_write). As with store_file_wrote, the commit
 * reads the file back for its CRC unless store_file_vouch gave it. */
int store_file_write_direct(struct store_file *f, const void *buf, size_t len);

enum store_state {
	STORE_PARTIAL,    /* begun, never sealed: being written, or its writer died */
	STORE_COMPLETE,   /* sealed; every file durable */
	STORE_FAILED,     /* sealed as failed, or found damaged */
	STORE_PRUNED,     /* removed by prune */
};

struct store_file_info {
	char name[256];
	uint64_t size;
	uint32_t crc;
};

/* Records appended for many files at once (a node agent's for its ranks'
 * images: one append to the index a node instead of one a rank, at 65,536
 * ranks a serialization point on one index; docs/coordinator.md). The
 * writer commits with store_file_commit_unrecorded: fsync, rename, fsync
 * the directory as store_file_commit, and *rec (out) says what its record
 * must say instead of appending it; another handle on the same checkpoint
 * (out of the same store or not) appends the records of many with
 * store_ckpt_record_files, in FILES records of the index (as many files
 * as fit a line: docs/store.md). Until then nothing vouches for the file:
 * a seal counts it as missing. -EINVAL for an annex file. */
struct store_file_record {
	struct store_file_info info;
	int image;                      /* the content began with the image magic */
};
int store_file_commit_unrecorded(struct store_file *f, struct store_file_record *rec);
int store_ckpt_record_files(struct store_ckpt *c, const struct store_file_record *recs, unsigned n);

struct store_ckpt_info {
	char name[64];
	enum store_state state;
	int current;            /* the one store_select() returns */
	uint64_t bytes;         /* sum of committed file sizes */
	unsigned files;         /* committed files */
	int64_t begin_time;     /* seconds since the epoch */
	int64_t end_time;       /* of the COMPLETE/FAILED record, or 0 */
	char reason[160];       /* why FAILED */
	char level[16];         /* the last LEVEL record: how far its redundancy got
				   after it was sealed ("" if none was recorded) */
	char level_reason[160]; /* that record's reason: why it stopped there */
};

/* Every checkpoint the index knows, oldest first. Damaged index records are
 * skipped and counted in *bad_records (may be NULL), each logged as a warning
 * naming its byte offset. out: *list (free()). */
int store_list(struct store *s, struct store_ckpt_info **list, size_t *count, unsigned *bad_records);
/* The committed files of one checkpoint. out: *files (free()). */
int store_ckpt_files(struct store *s, const char *name, struct store_file_info **files, size_t *count);
const char *store_state_name(enum store_state st);

/* The checkpoint to restart from: walk back from the newest COMPLETE one,
 * skipping any whose files are missing or have the wrong size; never a
 * PARTIAL or FAILED one. -ENOENT with a message if there is none. */
int store_select(struct store *s, char *name, size_t len);

/* Full check of one checkpoint: COMPLETE in the index, every file present
 * with its size, images verified chunk by chunk (img_verify), other files
 * by CRC32C. -EBADMSG and a message naming the file (and section and
 * offset) on the first problem. */
int store_verify(struct store *s, const char *name);
/* Every record of the index is intact; -EBADMSG naming the byte offset of the
 * first damaged one. */
int store_index_check(struct store *s);

/* Keep the newest `keep` COMPLETE checkpoints (and the current one); remove
 * older ones and abandoned partial or failed ones older than the newest
 * COMPLETE. A PRUNED record is appended before files are removed. */
int store_prune(struct store *s, unsigned keep, unsigned *removed);

/* Recycling, for node-local caches on a RAM disk, where writing over pages a
 * file already has runs several times faster than getting new ones: prune
 * moves the files of the checkpoints it removes into <job>/.spare/ (at most
 * `max` files there) instead of deleting them, and store_file_create writes
 * a new file over a spare one (renamed into place as its *.tmp, cut to its
 * length at commit) when there is one. A spare holds the bytes of a pruned
 * checkpoint until it is reused or dropped: it is never listed, selected or
 * verified. 0 (the default) turns recycling off. */
void store_set_recycle(struct store *s, unsigned max);
/* Reserve room for a file that will be written: a spare file named after
 * it (`name`, e.g. rank-00003.img), given its storage up to `size` now, so
 * the first file of that name is written over allocated pages like every
 * later one. Grows an existing reservation. Nothing without recycling. */
int store_spare_reserve(struct store *s, const char *name, uint64_t size);
/* Retire a committed file of checkpoint ckpt that nothing needs any more
 * (beyond cache_keep): with recycling, it becomes a spare as prune makes
 * them (its bytes and length kept; a reader following the next file
 * written over it as it grows reads store_io_size, the writer's mark,
 * not its length), unless a reader holds it (store_io_open's lock) or
 * `max` spares are there, or it is a *.tmp (its writer may be writing
 * still); otherwise, and without recycling, it is removed. A missing file
 * is fine. */
int store_file_retire(struct store *s, const char *ckpt, const char *name);
/* Retire every file of checkpoint ckpt (store_file_retire) and remove its
 * directory once empty: a checkpoint that failed, whose files are no
 * one's. A missing checkpoint is fine. */
int store_ckpt_retire(struct store *s, const char *ckpt);
/* A node cache keeps the files of its newest `keep` checkpoints
 * (cache_keep), `newest` one of them: once `newest` is established, the
 * checkpoints older than it beyond the keep - 1 newest of them are retired
 * (store_ckpt_retire), by number (store_ckpt_name_cmp). Newer ones (being
 * written) and entries that are no checkpoint's are left alone. */
int store_cache_trim(struct store *s, const char *newest, unsigned keep);
/* Remove every spare file (the job is done with this cache). */
int store_spares_drop(struct store *s);

/* Reading and scratch files, through the tier's operations (not by path):
 * what redundancy (src/redundancy) and restart read, and the transient files
 * they write. A handle names a committed file of checkpoint ckpt, or, with
 * ckpt NULL, a scratch file in the job directory (a copy fetched from
 * another node, a rebuilt image): scratch files are never listed, selected
 * or verified, and their names start with '.'.
 * store_io_open: an existing file, read only (-ENOENT with a message if it
 * is missing). store_scratch_create: a new scratch file, replacing one of
 * that name, write only (reopen it with store_io_open to read it).
 * On a store that recycles (store_set_recycle), a reader holds a shared
 * lock on its file until it closes it, which a retirement respects; other
 * stores (the global tier) take no lock. Every process of a job sets the
 * same recycling on its node cache (the key `recycle`).
 * out: *out, freed with store_io_close. */
struct store_io;
int store_io_open(struct store *s, const char *ckpt, const char *name, struct store_io **out);
int store_scratch_create(struct store *s, const char *name, struct store_io **out);
/* A file of checkpoint ckpt that another process is writing: its *.tmp,
 * or the file itself once committed (-ENOENT while neither exists), read
 * only; store_io_size grows as it is written. store_io_committed: 1 once
 * it has its final name (its size is then final; 1 for handles of
 * store_io_open too), 0 while it is still a *.tmp (or was removed: its
 * writer failed). */
int store_io_open_writing(struct store *s, const char *ckpt, const char *name,
			  struct store_io **out);
int store_io_committed(const struct store_io *io);
/* 1 if the file exists (a regular file), 0 if not. */
int store_io_exists(struct store *s, const char *ckpt, const char *name);
/* Size now (the file may grow while written); its path, for messages; its
 * descriptor, for img_open_fd (owned by the handle). */
uint64_t store_io_size(const struct store_io *io);
/* The same for a descriptor on a file of the tier: how far a file another
 * process writes is written (its length; for one written over a spare,
 * whose length is the spare's, what its writer marked) */
uint64_t store_fd_written(const char *tier, int fd);
const char *store_io_path(const struct store_io *io);
int store_io_fd(const struct store_io *io);
/* Read exactly len bytes at off (-EIO with a message on a short read), write
 * exactly len bytes at off (scratch files). */
int store_io_read(struct store_io *io, void *buf, size_t len, uint64_t off);
int store_io_write(struct store_io *io, const void *buf, size_t len, uint64_t off);
/* Close; sets *io to NULL. NULL and *io == NULL are fine. */
void store_io_close(struct store_io **io);
/* Remove a scratch file; a missing one is fine. */
int store_scratch_remove(struct store *s, const char *name);

/* Path of a checkpoint's directory or of a file in it. */
int store_ckpt_path(const struct store *s, const char *ckpt, const char *file, char *buf, size_t len);

#endif
