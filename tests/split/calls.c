/* calls.c - an MPI program that checks what the split process's wrappers
 * translate: ranks, tags and statuses, wildcards and MPI_PROC_NULL,
 * MPI_IN_PLACE, point-to-point with arrays of requests, probes, the
 * collectives, communicators from split/dup/create, non-blocking
 * collectives, derived datatypes, a Cartesian topology and a user-defined
 * reduction, strings MPI writes into the program's buffers. Built with
 * either MPI's mpicc, run natively or under either
 * lower half; rank 0 prints "PASS ranks=N" when every rank agrees, else
 * the failed checks. Any number of ranks >= 2. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;

#define CHECK(c)                                                                        \
	do {                                                                            \
		if (!(c)) {                                                             \
			fails++;                                                        \
			fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", rank, __FILE__, \
				__LINE__, #c);                                          \
		}                                                                       \
	} while (0)

static int rank, size;

static void point_to_point(void)
{
	int next = (rank + 1) % size, prev = (rank + size - 1) % size, count = -1;
	double out[4] = { rank, rank + 0.5, rank * 2.0, -1 }, in[4] = { 0 };
	MPI_Status st;
	MPI_Request req[4];
	int a = rank * 10, b = -1, c = -1, idx = -1, flag = 0;

	/* ring with a wildcard source and a status */
	MPI_Sendrecv(out, 3, MPI_DOUBLE, next, 7, in, 4, MPI_DOUBLE, MPI_ANY_SOURCE, 7,
		     MPI_COMM_WORLD, &st);
	CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 7);
	MPI_Get_count(&st, MPI_DOUBLE, &count);
	CHECK(count == 3);
	CHECK(in[0] == prev && in[1] == prev + 0.5 && in[2] == prev * 2.0);

	/* MPI_PROC_NULL: completes at once, status says so */
	MPI_Recv(in, 1, MPI_DOUBLE, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
	CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG);
	MPI_Get_count(&st, MPI_DOUBLE, &count);
	CHECK(count == 0);
	/* the same non-blocking and persistent; MPICH 4.0's own calls get the
	 * status wrong (source and tag 0 for MPI_Irecv, MPI_ANY_SOURCE for
	 * MPI_Start), so a program built with MPICH's mpicc, which may run
	 * natively, checks only the count */
	for (int persistent = 0; persistent < 2; persistent++) {
		st.MPI_SOURCE = st.MPI_TAG = -5;
		count = -1;
		if (persistent) {
			MPI_Recv_init(in, 1, MPI_DOUBLE, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &req[0]);
			MPI_Start(&req[0]);
		} else {
			MPI_Irecv(in, 1, MPI_DOUBLE, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &req[0]);
		}
		MPI_Wait(&req[0], &st);
		MPI_Get_count(&st, MPI_DOUBLE, &count);
		CHECK(count == 0 && (req[0] == MPI_REQUEST_NULL) == !persistent);
#ifndef MPICH_VERSION
		CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG);
#endif
		if (persistent)
			MPI_Request_free(&req[0]);
	}

	/* non-blocking, Waitall and Waitany */
	MPI_Irecv(&b, 1, MPI_INT, prev, 1, MPI_COMM_WORLD, &req[0]);
	MPI_Irecv(&c, 1, MPI_INT, next, 2, MPI_COMM_WORLD, &req[1]);
	MPI_Isend(&a, 1, MPI_INT, next, 1, MPI_COMM_WORLD, &req[2]);
	MPI_Isend(&a, 1, MPI_INT, prev, 2, MPI_COMM_WORLD, &req[3]);
	MPI_Waitany(4, req, &idx, &st);
	CHECK(idx >= 0 && idx < 4 && req[idx] == MPI_REQUEST_NULL);
	MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
	for (int i = 0; i < 4; i++)
		CHECK(req[i] == MPI_REQUEST_NULL);
	CHECK(b == prev * 10 && c == next * 10);

	/* Testany until done, then Test on a null request */
	MPI_Irecv(&b, 1, MPI_INT, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &req[0]);
	MPI_Send(&a, 1, MPI_INT, next, 3, MPI_COMM_WORLD);
	do
		MPI_Testany(1, req, &idx, &flag, &st);
	while (!flag);
	CHECK(idx == 0 && st.MPI_SOURCE == prev && b == prev * 10);
	MPI_Test(&req[0], &flag, MPI_STATUS_IGNORE);
	CHECK(flag);

	/* Probe and Iprobe see a message before it is received */
	MPI_Send(out, 2, MPI_DOUBLE, next, 4, MPI_COMM_WORLD);
	MPI_Probe(prev, 4, MPI_COMM_WORLD, &st);
	MPI_Get_count(&st, MPI_DOUBLE, &count);
	CHECK(st.MPI_SOURCE == prev && count == 2);
	MPI_Iprobe(MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, &flag, &st);
	CHECK(flag && st.MPI_SOURCE == prev);
	MPI_Recv(in, 2, MPI_DOUBLE, prev, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

	/* Sendrecv_replace */
	b = rank;
	MPI_Sendrecv_replace(&b, 1, MPI_INT, next, 5, prev, 5, MPI_COMM_WORLD, &st);
	CHECK(b == prev);
}

static void collectives(MPI_Comm comm, int base)
{
	int r, n, *all, *counts, *displs, x, sum = 0;
	long lsum;

	MPI_Comm_rank(comm, &r);
	MPI_Comm_size(comm, &n);
	all = calloc((size_t)n * 2, sizeof(int));
	counts = calloc((size_t)n, sizeof(int));
	displs = calloc((size_t)n, sizeof(int));
	for (int i = 0; i < n; i++) {
		counts[i] = 1;
		displs[i] = i;
		sum += base + i;
	}
	MPI_Barrier(comm);
	x = r == 0 ? base + 42 : -1;
	MPI_Bcast(&x, 1, MPI_INT, 0, comm);
	CHECK(x == base + 42);
	x = base + r;
	MPI_Reduce(&x, &all[0], 1, MPI_INT, MPI_SUM, n - 1, comm);
	if (r == n - 1)
		CHECK(all[0] == sum);
	lsum = base + r;
	MPI_Allreduce(MPI_IN_PLACE, &lsum, 1, MPI_LONG, MPI_SUM, comm);
	CHECK(lsum == sum);
	MPI_Scan(&x, &all[0], 1, MPI_INT, MPI_SUM, comm);
	CHECK(all[0] == (r + 1) * base + r * (r + 1) / 2);
	MPI_Gather(&x, 1, MPI_INT, all, 1, MPI_INT, 0, comm);
	for (int i = 0; r == 0 && i < n; i++)
		CHECK(all[i] == base + i);
	MPI_Gatherv(&x, 1, MPI_INT, all, counts, displs, MPI_INT, 0, comm);
	for (int i = 0; r == 0 && i < n; i++)
		CHECK(all[i] == base + i);
	for (int i = 0; i < n; i++)
		all[i] = base + 100 + i;
	MPI_Scatter(all, 1, MPI_INT, &x, 1, MPI_INT, 0, comm);
	CHECK(x == base + 100 + r);
	MPI_Scatterv(all, counts, displs, MPI_INT, &x, 1, MPI_INT, 0, comm);
	CHECK(x == base + 100 + r);
	x = base + r;
	MPI_Allgather(&x, 1, MPI_INT, all, 1, MPI_INT, comm);
	for (int i = 0; i < n; i++)
		CHECK(all[i] == base + i);
	for (int i = 0; i < n; i++)
		all[i] = r * 1000 + i;
	MPI_Alltoall(all, 1, MPI_INT, all + n, 1, MPI_INT, comm);
	for (int i = 0; i < n; i++)
		CHECK(all[n + i] == i * 1000 + r);
	MPI_Alltoallv(all, counts, displs, MPI_INT, all + n, counts, displs, MPI_INT, comm);
	for (int i = 0; i < n; i++)
		CHECK(all[n + i] == i * 1000 + r);
	free(all);
	free(counts);
	free(displs);
}

static void communicators(void)
{
	MPI_Comm half, dup, evens;
	MPI_Group world, even_group;
	int ranks[64], ne = 0, r, cmp;

	MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
	MPI_Comm_rank(half, &r);
	ne = 0;   /* key -rank: the higher world ranks of my parity come first */
	for (int j = rank + 2; j < size; j += 2)
		ne++;
	CHECK(r == ne);
	ne = 0;
	MPI_Comm_dup(MPI_COMM_WORLD, &dup);
	MPI_Comm_compare(dup, MPI_COMM_WORLD, &cmp);
	CHECK(cmp == MPI_CONGRUENT);
	MPI_Comm_group(MPI_COMM_WORLD, &world);
	for (int i = 0; i < size; i += 2)
		ranks[ne++] = i;
	MPI_Group_incl(world, ne, ranks, &even_group);
	MPI_Comm_create(MPI_COMM_WORLD, even_group, &evens);
	CHECK((rank % 2 == 0) == (evens != MPI_COMM_NULL));
	/* collectives on overlapping communicators, interleaved */
	collectives(half, 1000);
	collectives(dup, 2000);
	if (evens != MPI_COMM_NULL) {
		collectives(evens, 3000);
		MPI_Comm_free(&evens);
		CHECK(evens == MPI_COMM_NULL);
	}
	collectives(MPI_COMM_WORLD, 4000);
	MPI_Group_free(&even_group);
	MPI_Group_free(&world);
	CHECK(world == MPI_GROUP_NULL);
	MPI_Comm_free(&half);
	MPI_Comm_free(&dup);
	CHECK(dup == MPI_COMM_NULL);
}

static void nonblocking_collectives(void)
{
	MPI_Request r[2];
	int x = rank == 0 ? 99 : 0, flag = 0;

	MPI_Ibarrier(MPI_COMM_WORLD, &r[0]);
	MPI_Ibcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD, &r[1]);
	while (!flag)
		MPI_Test(&r[0], &flag, MPI_STATUS_IGNORE);
	MPI_Wait(&r[1], MPI_STATUS_IGNORE);
	CHECK(x == 99 && r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL);
}

struct particle {
	int id;
	double pos[3];
	char tag;
};

static void datatypes(void)
{
	MPI_Datatype contig, vec, hvec, idx, st, resized, dup;
	int blocks[3] = { 1, 3, 1 }, idx_len[2] = { 2, 1 }, idx_disp[2] = { 0, 4 }, sz = 0;
	MPI_Aint disps[3], lb, extent;
	MPI_Datatype types[3] = { MPI_INT, MPI_DOUBLE, MPI_CHAR };
	struct particle p[2], q[2];
	int m[16], out[16], next = (rank + 1) % size, prev = (rank + size - 1) % size;

	MPI_Type_contiguous(4, MPI_INT, &contig);
	MPI_Type_vector(4, 1, 4, MPI_INT, &vec);                    /* a column of 4x4 */
	MPI_Type_create_hvector(2, 1, 2 * sizeof(int), MPI_INT, &hvec);
	MPI_Type_indexed(2, idx_len, idx_disp, MPI_INT, &idx);
	disps[0] = offsetof(struct particle, id);
	disps[1] = offsetof(struct particle, pos);
	disps[2] = offsetof(struct particle, tag);
	MPI_Type_create_struct(3, blocks, disps, types, &st);
	MPI_Type_create_resized(st, 0, sizeof(struct particle), &resized);
	MPI_Type_dup(resized, &dup);
	MPI_Datatype all[] = { contig, vec, hvec, idx, dup };
	for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		MPI_Type_commit(&all[i]);
	MPI_Type_size(vec, &sz);
	CHECK(sz == 4 * (int)sizeof(int));
	MPI_Type_get_extent(dup, &lb, &extent);
	CHECK(lb == 0 && extent == (MPI_Aint)sizeof(struct particle));

	for (int i = 0; i < 16; i++)
		m[i] = rank * 100 + i, out[i] = -1;
	MPI_Sendrecv(m, 1, all[1], next, 9, out, 4, MPI_INT, prev, 9, MPI_COMM_WORLD,
		     MPI_STATUS_IGNORE);
	for (int i = 0; i < 4; i++)
		CHECK(out[i] == prev * 100 + 4 * i);
	MPI_Sendrecv(m, 1, all[3], next, 10, out, 3, MPI_INT, prev, 10, MPI_COMM_WORLD,
		     MPI_STATUS_IGNORE);
	CHECK(out[0] == prev * 100 && out[1] == prev * 100 + 1 && out[2] == prev * 100 + 4);
	MPI_Sendrecv(m, 1, all[2], next, 11, out, 2, MPI_INT, prev, 11, MPI_COMM_WORLD,
		     MPI_STATUS_IGNORE);
	CHECK(out[0] == prev * 100 && out[1] == prev * 100 + 2);
	memset(q, 0, sizeof(q));
	for (int i = 0; i < 2; i++)
		p[i] = (struct particle){ rank * 10 + i, { rank, i, 0.5 }, (char)('a' + rank) };
	MPI_Sendrecv(p, 2, all[4], next, 12, q, 2, all[4], prev, 12, MPI_COMM_WORLD,
		     MPI_STATUS_IGNORE);
	for (int i = 0; i < 2; i++)
		CHECK(q[i].id == prev * 10 + i && q[i].pos[0] == prev && q[i].pos[1] == i &&
		      q[i].tag == 'a' + prev);
	MPI_Bcast(m, 1, all[0], 0, MPI_COMM_WORLD);
	CHECK(m[0] == 0 && m[3] == 3);
	for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		MPI_Type_free(&all[i]);
	CHECK(all[0] == MPI_DATATYPE_NULL);
	MPI_Type_free(&st);
	MPI_Type_free(&resized);
}

static void topology(void)
{
	int dims[2] = { 0, 0 }, periods[2] = { 1, 0 }, coords[2], src, dst, r, remain[2] = { 1, 0 };
	MPI_Comm cart, row;

	MPI_Dims_create(size, 2, dims);
	MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
	/* MPI_CART and MPI_GRAPH differ between the ABIs */
	MPI_Topo_test(cart, &r);
	CHECK(r == MPI_CART);
	MPI_Topo_test(MPI_COMM_WORLD, &r);
	CHECK(r == MPI_UNDEFINED);
	MPI_Comm_rank(cart, &r);
	MPI_Cart_coords(cart, r, 2, coords);
	MPI_Cart_shift(cart, 1, 1, &src, &dst);   /* not periodic: the edges see MPI_PROC_NULL */
	CHECK(coords[1] == 0 ? src == MPI_PROC_NULL : src >= 0);
	CHECK(coords[1] == dims[1] - 1 ? dst == MPI_PROC_NULL : dst >= 0);
	MPI_Cart_shift(cart, 0, 1, &src, &dst);   /* periodic */
	CHECK(src >= 0 && dst >= 0);
	MPI_Cart_sub(cart, remain, &row);
	MPI_Comm_size(row, &r);
	CHECK(r == dims[0]);
	MPI_Comm_free(&row);
	MPI_Comm_free(&cart);
}

/* element-wise maximum of absolute values, a user-defined operation */
static void absmax(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	double *a = in, *b = inout;

	if (*dt != MPI_DOUBLE)
		fails++;
	for (int i = 0; i < *len; i++) {
		double x = a[i] < 0 ? -a[i] : a[i], y = b[i] < 0 ? -b[i] : b[i];

		b[i] = x > y ? x : y;
	}
}

/* made and freed 100 times, as ScaLAPACK's BLACS do per combine: more
 * than the split process's 64 trampolines, which a freed operation must
 * give back (NWChem failed at its 65th) */
static void user_op(void)
{
	for (int i = 0; i < 100; i++) {
		MPI_Op op;
		double v[2] = { rank % 2 ? -(double)rank : rank, i }, r[2];

		CHECK(MPI_Op_create(absmax, 1, &op) == MPI_SUCCESS);
		MPI_Allreduce(v, r, 2, MPI_DOUBLE, op, MPI_COMM_WORLD);
		CHECK(r[0] == size - 1 && r[1] == i);
		MPI_Op_free(&op);
		CHECK(op == MPI_OP_NULL);
	}
}

/* The predefined attributes of a window of each flavor: what the program
 * gave, the flavor of its call (MPI_Win_allocate's too, which the lower
 * half makes with MPI_Win_create) and a memory model of the program's
 * mpi.h (MPI_WIN_UNIFIED is 0 in Open MPI's, 2 in MPICH's) */
static void win_attrs(void)
{
	static int mem[10];
	MPI_Win w[3];
	MPI_Aint *sz;
	int *du, *fl, *model, flag, *base, *abase;

	MPI_Win_create(mem, sizeof(mem), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &w[0]);
	MPI_Win_allocate(24, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &abase, &w[1]);
	MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &w[2]);
	for (int i = 0; i < 3; i++) {
		static const int flavors[] = { MPI_WIN_FLAVOR_CREATE, MPI_WIN_FLAVOR_ALLOCATE,
					       MPI_WIN_FLAVOR_DYNAMIC };
		static const MPI_Aint sizes[] = { sizeof(mem), 24, 0 };
		static const int units[] = { sizeof(int), 8, 1 };

		CHECK(MPI_Win_get_attr(w[i], MPI_WIN_BASE, &base, &flag) == MPI_SUCCESS && flag);
		/* MPICH's own MPI_Win_allocate answers another base on rank 1
		 * than the one it gave (its node's segment), so that one is
		 * not checked */
		CHECK(i == 1 || base == (i == 0 ? mem : MPI_BOTTOM));
		CHECK(MPI_Win_get_attr(w[i], MPI_WIN_SIZE, &sz, &flag) == MPI_SUCCESS && flag);
		CHECK(*sz == sizes[i]);
		CHECK(MPI_Win_get_attr(w[i], MPI_WIN_DISP_UNIT, &du, &flag) == MPI_SUCCESS && flag);
		CHECK(*du == units[i]);
		CHECK(MPI_Win_get_attr(w[i], MPI_WIN_CREATE_FLAVOR, &fl, &flag) == MPI_SUCCESS &&
		      flag);
		CHECK(*fl == flavors[i]);
		CHECK(MPI_Win_get_attr(w[i], MPI_WIN_MODEL, &model, &flag) == MPI_SUCCESS && flag);
		CHECK(*model == MPI_WIN_UNIFIED || *model == MPI_WIN_SEPARATE);
	}
	for (int i = 0; i < 3; i++)
		MPI_Win_free(&w[i]);
}

/* Strings MPI writes into the program's buffers stay inside them, with
 * the sizes of the program's own mpi.h, whatever MPI is below: a canary
 * after each buffer must be intact (MPICH's 2019-byte version string once
 * ran over Open MPI's 256 bytes of a program built with Open MPI). */
static void strings(void)
{
	struct {
		char v[MPI_MAX_LIBRARY_VERSION_STRING];
		char canary[64];
	} lib;
	struct {
		char v[MPI_MAX_PROCESSOR_NAME];
		char canary[64];
	} host;
	struct {
		char v[MPI_MAX_ERROR_STRING];
		char canary[64];
	} err;
	int len = -1;

	memset(&lib, 0x5a, sizeof(lib));
	memset(&host, 0x5a, sizeof(host));
	memset(&err, 0x5a, sizeof(err));
	CHECK(MPI_Get_library_version(lib.v, &len) == MPI_SUCCESS);
	/* Open MPI counts the NUL, MPICH does not */
	CHECK(len > 0 && len <= MPI_MAX_LIBRARY_VERSION_STRING && strlen(lib.v) <= (size_t)len);
	CHECK(MPI_Get_processor_name(host.v, &len) == MPI_SUCCESS);
	CHECK(len > 0 && len <= MPI_MAX_PROCESSOR_NAME && strlen(host.v) <= (size_t)len);
	CHECK(MPI_Error_string(MPI_ERR_TRUNCATE, err.v, &len) == MPI_SUCCESS);
	CHECK(len > 0 && len <= MPI_MAX_ERROR_STRING && strlen(err.v) <= (size_t)len);
	for (unsigned i = 0; i < 64; i++)
		CHECK(lib.canary[i] == 0x5a && host.canary[i] == 0x5a && err.canary[i] == 0x5a);
}

int main(int argc, char **argv)
{
	int provided = -1, flag = 0, total = 0;
	double t0;

	MPI_Initialized(&flag);
	if (flag)
		return 3;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	CHECK(provided >= MPI_THREAD_FUNNELED);
	MPI_Initialized(&flag);
	CHECK(flag);
	t0 = MPI_Wtime();
	point_to_point();
	communicators();
	nonblocking_collectives();
	datatypes();
	topology();
	user_op();
	win_attrs();
	strings();
	CHECK(MPI_Wtime() >= t0);
	MPI_Allreduce(&fails, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf(total ? "FAIL %d\n" : "PASS ranks=%d\n", total ? total : size);
	MPI_Finalize();
	MPI_Finalized(&flag);
	return total || !flag;
}
