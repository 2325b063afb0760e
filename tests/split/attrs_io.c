/* attrs_io.c - attributes, keyvals, names, MPI_Alloc_mem and MPI-IO made
 * before the loop and used in it (tests/split).
 *
 *   attrs_io ITERATIONS SLEEP_MS FILE
 *
 * Any number of ranks >= 2. Before the loop each rank:
 *  - creates communicator keyvals: K_COPY (a copy callback that gives the
 *    dup a new block with its generation one higher, a delete callback that
 *    frees blocks; both count their calls in the extra state), K_DUP
 *    (MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN), K_NOCOPY
 *    (MPI_COMM_NULL_COPY_FN and the counting delete), an MPI-1 keyval
 *    (MPI_Keyval_create with MPI_DUP_FN), and a datatype keyval
 *    (MPI_TYPE_DUP_FN); sets them on MPI_COMM_WORLD and on a contiguous
 *    datatype; sets an attribute on MPI_COMM_SELF whose delete callback
 *    prints "rank R: self attribute deleted" (MPI_Finalize calls it);
 *  - names a dup of MPI_COMM_WORLD;
 *  - takes 64 KiB with MPI_Alloc_mem and fills it;
 *  - opens FILE on MPI_COMM_WORLD (MPI_MODE_CREATE | MPI_MODE_RDWR), sets a
 *    view of ints with an 8-byte header skipped, and writes the header.
 *
 * Each iteration prints "rank R iteration I", then checks the attributes
 * of MPI_COMM_WORLD, the datatype and MPI_TAG_UB; dups MPI_COMM_WORLD and
 * checks what the dup got (K_COPY's block one generation on, K_DUP's value,
 * no K_NOCOPY, the MPI-1 one, no name), frees it and checks the delete
 * callback ran; dups the datatype and frees it likewise; checks the names;
 * sends the right neighbour part of the MPI_Alloc_mem block and checks what
 * it got from the left; writes a block of ints at its offset for this
 * iteration (MPI_File_write_at), one int with the individual file pointer
 * (MPI_File_write), waits for the others (MPI_Barrier), reads and checks the
 * left neighbour's block of this iteration and its own block of iteration
 * 0 (MPI_File_read_at) and checks MPI_File_get_position; then sleeps.
 *
 * At the end every rank reads the whole file back and checks it, rank 0
 * sums the checks (MPI_Reduce) and prints
 * "PASS ranks=N iterations=I checks=K" if K is the count expected from N
 * and I alone. Any wrong value prints a FAIL line and aborts the job. */
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAGIC 0x5a715a71
#define ALLOC_INTS (16 * 1024)  /* 64 KiB */
#define XCHG 1024               /* ints sent from it */
#define SLOTS (ALLOC_INTS / XCHG)
#define BLOCK 256               /* ints per rank and iteration */
#define HEADER 8                /* bytes before the view */
#define CHECKS_PER_ITER 15

struct block {
	int magic, rank, gen;
};

struct counts {
	int copies, deletes;
};

static int rank, size;
static long checks;
static struct counts counts;

#include "check.h"

static int copy_block(MPI_Comm old, int k, void *extra, void *in, void *out, int *flag)
{
	const struct block *b = in;
	struct block *n = malloc(sizeof(*n));

	(void)old, (void)k;
	*n = (struct block){ b->magic, b->rank, b->gen + 1 };
	((struct counts *)extra)->copies++;
	*(void **)out = n;
	*flag = 1;
	return MPI_SUCCESS;
}

static int delete_block(MPI_Comm c, int k, void *val, void *extra)
{
	(void)c, (void)k;
	if (val != (void *)&counts)   /* K_NOCOPY's value is not a block */
		free(val);
	((struct counts *)extra)->deletes++;
	return MPI_SUCCESS;
}

static int delete_self(MPI_Comm c, int k, void *val, void *extra)
{
	(void)c, (void)k, (void)extra;
	printf("rank %d: self attribute deleted (%s)\n", rank, (char *)val);
	fflush(stdout);
	return MPI_SUCCESS;
}

static int value_at(int it, int r, int i)
{
	return (it * 7919 + r * 104729 + i * 31) ^ 0x2545f491;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 20;
	long ms = argc > 2 ? atol(argv[2]) : 100, total = 0, expect;
	const char *path = argc > 3 ? argv[3] : "attrs_io.dat";
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	int k_copy, k_dup, k_nocopy, k_old, k_type, k_self, flag, *mem, *got;
	int tag_ub = 0, blk[BLOCK], rd[BLOCK];
	struct block *wb = malloc(sizeof(*wb));
	MPI_Datatype ctype, tdup;
	MPI_Comm named, dup;
	MPI_File fh;
	char name[MPI_MAX_OBJECT_NAME], want[MPI_MAX_OBJECT_NAME];
	void *v;
	int len, *ip;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	require(size >= 2, "attrs_io needs 2 ranks or more, not %d", size);

	*wb = (struct block){ MAGIC, rank, 0 };
	MPI_Comm_create_keyval(copy_block, delete_block, &k_copy, &counts);
	MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &k_dup, NULL);
	MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_block, &k_nocopy, &counts);
	MPI_Keyval_create(MPI_DUP_FN, MPI_NULL_DELETE_FN, &k_old, NULL);
	MPI_Type_create_keyval(MPI_TYPE_DUP_FN, MPI_TYPE_NULL_DELETE_FN, &k_type, NULL);
	MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_self, &k_self, NULL);
	require(k_copy != k_dup && k_dup != k_nocopy && k_nocopy != k_old && k_old != k_type,
		"keyvals not distinct");
	MPI_Comm_set_attr(MPI_COMM_WORLD, k_copy, wb);
	MPI_Comm_set_attr(MPI_COMM_WORLD, k_dup, (void *)(intptr_t)(1000 + rank));
	MPI_Comm_set_attr(MPI_COMM_WORLD, k_nocopy, &counts);
	MPI_Attr_put(MPI_COMM_WORLD, k_old, (void *)(intptr_t)(2000 + rank));
	MPI_Comm_set_attr(MPI_COMM_SELF, k_self, "at MPI_Finalize");
	MPI_Type_contiguous(4, MPI_INT, &ctype);
	MPI_Type_commit(&ctype);
	MPI_Type_set_attr(ctype, k_type, (void *)(intptr_t)(3000 + rank));
	MPI_Type_set_name(ctype, "four ints");
	MPI_Comm_dup(MPI_COMM_WORLD, &named);
	snprintf(want, sizeof(want), "named dup of rank %d", rank);
	MPI_Comm_set_name(named, want);
	MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ip, &flag);
	require(flag && *ip >= 32767, "MPI_TAG_UB: flag %d", flag);
	tag_ub = *ip;

	MPI_Alloc_mem(ALLOC_INTS * sizeof(int), MPI_INFO_NULL, &mem);
	for (int i = 0; i < ALLOC_INTS; i++)
		mem[i] = value_at(-1, rank, i);
	got = malloc(XCHG * sizeof(int));

	require(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL,
			      &fh) == MPI_SUCCESS, "MPI_File_open %s", path);
	if (rank == 0)
		MPI_File_write_at(fh, 0, "STASIS-1", HEADER, MPI_BYTE, MPI_STATUS_IGNORE);
	MPI_File_set_view(fh, HEADER, MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
	/* the individual file pointer's ints go after every block */
	MPI_File_seek(fh, (MPI_Offset)(iters * size * BLOCK + rank * iters), MPI_SEEK_SET);

	for (int it = 0; it < iters; it++) {
		struct block *b;
		MPI_Status st;
		MPI_Offset pos;
		int left = (rank + size - 1) % size, right = (rank + 1) % size, n;

		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);

		/* attributes of MPI_COMM_WORLD and the datatype */
		MPI_Comm_get_attr(MPI_COMM_WORLD, k_copy, &b, &flag);
		check(flag && b == wb && b->magic == MAGIC && b->rank == rank && b->gen == 0,
		      "iteration %d: K_COPY on MPI_COMM_WORLD: flag %d", it, flag);
		MPI_Comm_get_attr(MPI_COMM_WORLD, k_dup, &v, &flag);
		check(flag && (intptr_t)v == 1000 + rank, "iteration %d: K_DUP %ld", it, (long)(intptr_t)v);
		MPI_Attr_get(MPI_COMM_WORLD, k_old, &v, &flag);
		check(flag && (intptr_t)v == 2000 + rank, "iteration %d: MPI-1 keyval %ld", it,
		      (long)(intptr_t)v);
		MPI_Type_get_attr(ctype, k_type, &v, &flag);
		check(flag && (intptr_t)v == 3000 + rank, "iteration %d: datatype attribute", it);
		MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ip, &flag);
		check(flag && *ip >= 32767, "iteration %d: MPI_TAG_UB %d, was %d", it, flag ? *ip : -1,
		      tag_ub);

		/* what a dup gets, and what its free deletes */
		int copies = counts.copies, deletes = counts.deletes;

		MPI_Comm_dup(MPI_COMM_WORLD, &dup);
		MPI_Comm_get_attr(dup, k_copy, &b, &flag);
		check(flag && b != wb && b->magic == MAGIC && b->rank == rank && b->gen == 1 &&
		      counts.copies == copies + 1, "iteration %d: K_COPY on the dup", it);
		MPI_Comm_get_attr(dup, k_dup, &v, &flag);
		n = flag && (intptr_t)v == 1000 + rank;
		MPI_Comm_get_attr(dup, k_nocopy, &v, &flag);
		n = n && !flag;
		MPI_Attr_get(dup, k_old, &v, &flag);
		n = n && flag && (intptr_t)v == 2000 + rank;
		MPI_Comm_get_name(dup, name, &len);
		check(n && len == 0 && name[0] == 0, "iteration %d: the dup's attributes or name '%s'", it,
		      name);
		MPI_Comm_free(&dup);
		check(dup == MPI_COMM_NULL && counts.deletes == deletes + 1,
		      "iteration %d: MPI_Comm_free: %d deletes, want %d", it, counts.deletes, deletes + 1);
		MPI_Type_dup(ctype, &tdup);
		MPI_Type_get_attr(tdup, k_type, &v, &flag);
		n = flag && (intptr_t)v == 3000 + rank;
		MPI_Type_free(&tdup);
		check(n && tdup == MPI_DATATYPE_NULL, "iteration %d: MPI_Type_dup's attribute", it);

		/* names */
		MPI_Comm_get_name(named, name, &len);
		n = !strcmp(name, want) && len == (int)strlen(want);
		MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
		n = n && !strcmp(name, "MPI_COMM_WORLD");
		MPI_Type_get_name(ctype, name, &len);
		check(n && !strcmp(name, "four ints"), "iteration %d: names", it);

		/* MPI_Alloc_mem's memory: the right neighbour gets a part of it */
		for (int i = 0; i < XCHG; i++)
			mem[(it % SLOTS) * XCHG + i] = value_at(it, rank, i);
		MPI_Sendrecv(mem + (it % SLOTS) * XCHG, XCHG, MPI_INT, right, 7, got, XCHG, MPI_INT,
			     left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		n = 0;
		for (int i = 0; i < XCHG; i++)
			n += got[i] != value_at(it, left, i);
		for (int j = 0; j < SLOTS; j++) {   /* what this and older iterations left */
			int last = it - ((it - j) % SLOTS + SLOTS) % SLOTS;

			for (int i = 0; i < XCHG; i++)
				n += mem[j * XCHG + i] != (last < 0 ? value_at(-1, rank, j * XCHG + i)
								    : value_at(last, rank, i));
		}
		check(n == 0, "iteration %d: %d ints wrong in MPI_Alloc_mem's memory", it, n);

		/* MPI-IO at offsets (in ints, after the header) */
		for (int i = 0; i < BLOCK; i++)
			blk[i] = value_at(it, rank, i);
		MPI_File_write_at(fh, (MPI_Offset)(it * size + rank) * BLOCK, blk, BLOCK, MPI_INT, &st);
		MPI_Get_count(&st, MPI_INT, &n);
		check(n == BLOCK, "iteration %d: MPI_File_write_at wrote %d ints", it, n);
		n = value_at(it, rank, -1);
		MPI_File_write(fh, &n, 1, MPI_INT, MPI_STATUS_IGNORE);
		MPI_File_get_position(fh, &pos);
		check(pos == (MPI_Offset)(iters * size * BLOCK + rank * iters + it + 1),
		      "iteration %d: file pointer at %lld", it, (long long)pos);
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_File_read_at(fh, (MPI_Offset)(it * size + left) * BLOCK, rd, BLOCK, MPI_INT, &st);
		MPI_Get_count(&st, MPI_INT, &n);
		for (int i = 0; i < BLOCK; i++)
			n += rd[i] != value_at(it, left, i);
		check(n == BLOCK, "iteration %d: the left neighbour's block", it);
		MPI_File_read_at(fh, (MPI_Offset)rank * BLOCK, rd, BLOCK, MPI_INT, MPI_STATUS_IGNORE);
		n = 0;
		for (int i = 0; i < BLOCK; i++)
			n += rd[i] != value_at(0, rank, i);
		check(n == 0, "iteration %d: block of iteration 0: %d ints wrong", it, n);

		nanosleep(&ts, NULL);
	}

	/* the whole file, as each rank wrote it */
	{
		MPI_Offset fsize = 0;
		long bad = 0;
		int *all = malloc((size_t)iters * size * BLOCK * sizeof(int));
		int tail[iters];
		char head[HEADER];

		MPI_Barrier(MPI_COMM_WORLD);
		MPI_File_get_size(fh, &fsize);
		check(fsize == HEADER + (MPI_Offset)(iters * size * BLOCK + size * iters) * 4,
		      "file size %lld", (long long)fsize);
		MPI_File_read_at(fh, 0, all, iters * size * BLOCK, MPI_INT, MPI_STATUS_IGNORE);
		for (int it = 0; it < iters; it++)
			for (int r = 0; r < size; r++)
				for (int i = 0; i < BLOCK; i++)
					bad += all[(it * size + r) * BLOCK + i] != value_at(it, r, i);
		MPI_File_read_at(fh, (MPI_Offset)(iters * size * BLOCK + rank * iters), tail, iters,
				 MPI_INT, MPI_STATUS_IGNORE);
		for (int it = 0; it < iters; it++)
			bad += tail[it] != value_at(it, rank, -1);
		MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL);
		MPI_File_read_at(fh, 0, head, HEADER, MPI_BYTE, MPI_STATUS_IGNORE);
		bad += memcmp(head, "STASIS-1", HEADER) != 0;
		check(bad == 0, "the file: %ld values wrong", bad);
		free(all);
	}
	MPI_File_close(&fh);
	require(fh == MPI_FILE_NULL, "MPI_File_close");

	printf("rank %d made %ld checks\n", rank, checks);
	fflush(stdout);
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	expect = (long)size * (iters * CHECKS_PER_ITER + 2);

	/* keyvals freed, attributes deleted */
	MPI_Comm_delete_attr(MPI_COMM_WORLD, k_copy);
	MPI_Comm_get_attr(MPI_COMM_WORLD, k_copy, &v, &flag);
	require(!flag, "K_COPY still set after MPI_Comm_delete_attr");
	MPI_Comm_free_keyval(&k_copy);
	require(k_copy == MPI_KEYVAL_INVALID, "MPI_Comm_free_keyval");
	MPI_Free_mem(mem);
	MPI_Comm_free(&named);
	MPI_Type_free(&ctype);
	if (rank == 0) {
		printf("%s ranks=%d iterations=%d checks=%ld\n", total == expect ? "PASS" : "FAIL",
		       size, iters, total);
		fflush(stdout);
	}
	MPI_Finalize();
	free(got);
	return total == expect || rank != 0 ? 0 : 1;
}
