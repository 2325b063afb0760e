/* errh.c - error handlers across checkpoints (tests/split/test_errh.py).
 * 2 ranks or more.
 *
 *   errh ITERATIONS SLEEP_MS     every iteration, on every rank:
 *     - MPI_COMM_WORLD has MPI_ERRORS_RETURN: a send to rank SIZE returns
 *       MPI_ERR_RANK (MPI_Error_class and MPI_Error_string agree);
 *     - DUP, a duplicate of WORLD made after that, inherited it;
 *     - USER, another duplicate, has the program's handler, and SUB,
 *       split from USER, inherited it: a send to rank SIZE on USER and
 *       MPI_Comm_call_errhandler on SUB call it with that communicator and
 *       the code;
 *     - a file opened with the program's file handler set on MPI_FILE_NULL
 *       has it: reading a file opened write-only calls it;
 *     - rank 1 receives rank 0's 4 ints into room for 2, by MPI_Recv and by
 *       MPI_Irecv + MPI_Wait: MPI_ERR_TRUNCATE, then the next message is
 *       whole; by MPI_Irecv on USER + MPI_Wait: USER's handler is called
 *       (a request's error is raised on its communicator's handler, not
 *       WORLD's); by MPI_Waitall of a whole and a truncated receive:
 *       MPI_ERR_IN_STATUS, the statuses' MPI_ERROR MPI_SUCCESS and
 *       MPI_ERR_TRUNCATE;
 *     then rank 0 prints "rank 0 iteration I" and every rank sleeps
 *     SLEEP_MS (checkpoints are taken there). At the end rank 0 prints
 *     "PASS ranks=N iterations=I calls=C", C the handler calls of all ranks
 *     (2 an iteration on each, 3 on rank 1);
 *     anything wrong: a FAIL line and MPI_Abort.
 *   errh fatal                   rank 1 sends to rank SIZE on a duplicate
 *                                of WORLD, whose handler is still
 *                                MPI_ERRORS_ARE_FATAL: the job ends;
 *                                "survived" is printed if it does not.
 *   errh badcomm                 with MPI_ERRORS_RETURN on WORLD, each rank
 *                                duplicates a value that is no
 *                                communicator and prints "rank R:
 *                                MPI_Comm_dup of no communicator: class
 *                                C" (MPI_ERR_COMM expected).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fail.h"

static int rank, size, it = -1;
static int calls, file_calls;
static MPI_Comm user_comm, sub, expect_comm;
static int expect_code;

static void bad(const char *what)
{
	fail(rank, it, what);
}

static int class_of(int code);

static void on_error(MPI_Comm *c, int *code, ...)
{
	if (*c != expect_comm)
		bad("the handler was called with another communicator");
	if (class_of(*code) != expect_code)   /* MPICH passes a code of the class */
		bad("the handler was called with another error class");
	calls++;
}

static void on_file_error(MPI_File *f, int *code, ...)
{
	int cls;

	(void)f;
	MPI_Error_class(*code, &cls);
	if (cls == MPI_SUCCESS)
		bad("the file handler was called with MPI_SUCCESS");
	file_calls++;
}

static int class_of(int code)
{
	int cls = -1;

	if (MPI_Error_class(code, &cls) != MPI_SUCCESS)
		bad("MPI_Error_class");
	return cls;
}

static void send_to_nobody(MPI_Comm c)
{
	int v = 1, ret = MPI_Send(&v, 1, MPI_INT, size, 0, c);
	char text[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (ret == MPI_SUCCESS || class_of(ret) != MPI_ERR_RANK)
		bad("a send to rank SIZE did not return MPI_ERR_RANK");
	if (MPI_Error_string(ret, text, &len) != MPI_SUCCESS || len <= 0 ||
	    (int)strlen(text) != len)
		bad("MPI_Error_string");
}

static void truncated(void)
{
	int four[4] = { 1, 2, 3, 4 }, two[2] = { 0, 0 }, whole[4] = { 0 }, ret;
	MPI_Request r;

	if (rank == 0) {
		for (int k = 0; k < 3; k++) {
			four[0] = it * 10 + k;
			MPI_Send(four, 4, MPI_INT, 1, 5, MPI_COMM_WORLD);
		}
		MPI_Send(four, 4, MPI_INT, 1, 6, user_comm);
		MPI_Send(four, 4, MPI_INT, 1, 7, MPI_COMM_WORLD);
		MPI_Send(four, 4, MPI_INT, 1, 8, MPI_COMM_WORLD);
	} else if (rank == 1) {
		MPI_Request rs[2];
		MPI_Status st[2];
		int before = calls;

		ret = MPI_Recv(two, 2, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		if (ret == MPI_SUCCESS || class_of(ret) != MPI_ERR_TRUNCATE)
			bad("MPI_Recv of 4 ints into 2 did not return MPI_ERR_TRUNCATE");
		MPI_Irecv(two, 2, MPI_INT, 0, 5, MPI_COMM_WORLD, &r);
		ret = MPI_Wait(&r, MPI_STATUS_IGNORE);
		if (ret == MPI_SUCCESS || class_of(ret) != MPI_ERR_TRUNCATE)
			bad("MPI_Wait of 4 ints into 2 did not return MPI_ERR_TRUNCATE");
		if (MPI_Recv(whole, 4, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
		    whole[0] != it * 10 + 2 || whole[3] != 4)
			bad("the message after the truncated ones");

		expect_comm = user_comm;
		expect_code = MPI_ERR_TRUNCATE;
		MPI_Irecv(two, 2, MPI_INT, 0, 6, user_comm, &r);
		ret = MPI_Wait(&r, MPI_STATUS_IGNORE);
		if (ret == MPI_SUCCESS || class_of(ret) != MPI_ERR_TRUNCATE || calls != before + 1)
			bad("MPI_Wait of a truncated receive on USER did not call USER's handler");
		expect_comm = MPI_COMM_NULL;

		MPI_Irecv(whole, 4, MPI_INT, 0, 7, MPI_COMM_WORLD, &rs[0]);
		MPI_Irecv(two, 2, MPI_INT, 0, 8, MPI_COMM_WORLD, &rs[1]);
		st[0].MPI_ERROR = st[1].MPI_ERROR = -1;
		ret = MPI_Waitall(2, rs, st);
		if (ret != MPI_ERR_IN_STATUS || st[0].MPI_ERROR != MPI_SUCCESS ||
		    class_of(st[1].MPI_ERROR) != MPI_ERR_TRUNCATE ||
		    rs[0] != MPI_REQUEST_NULL || rs[1] != MPI_REQUEST_NULL)
			bad("MPI_Waitall of a whole and a truncated receive");
	}
}

static void file_error(MPI_Errhandler feh, const char *path)
{
	MPI_File f;
	MPI_Errhandler got;
	int v = 0, before = file_calls;

	if (MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_WRONLY | MPI_MODE_CREATE, MPI_INFO_NULL,
			  &f) != MPI_SUCCESS)
		bad("MPI_File_open");
	MPI_File_get_errhandler(f, &got);
	if (got != feh)
		bad("an opened file does not have MPI_FILE_NULL's handler");
	/* not freed: MPICH 4.0's MPI_File_get_errhandler takes no reference,
	 * and its MPI_File_close then fails an assertion */
	if (MPI_File_read_at(f, 0, &v, 1, MPI_INT, MPI_STATUS_IGNORE) == MPI_SUCCESS)
		bad("reading a write-only file succeeded");
	if (file_calls != before + 1)
		bad("the file handler was not called");
	MPI_File_close(&f);
}

static void iteration(MPI_Comm dup, MPI_Errhandler eh, MPI_Errhandler feh, const char *path)
{
	MPI_Errhandler got;
	int ret, before = calls;

	send_to_nobody(MPI_COMM_WORLD);
	send_to_nobody(dup);
	MPI_Comm_get_errhandler(dup, &got);
	if (got != MPI_ERRORS_RETURN)
		bad("DUP does not have MPI_ERRORS_RETURN");
	MPI_Comm_get_errhandler(sub, &got);
	if (got != eh)
		bad("SUB does not have the program's handler");
	MPI_Errhandler_free(&got);

	expect_comm = user_comm;
	expect_code = MPI_ERR_RANK;
	{
		int v = 1;

		ret = MPI_Send(&v, 1, MPI_INT, size, 0, user_comm);
	}
	if (ret == MPI_SUCCESS || class_of(ret) != MPI_ERR_RANK || calls != before + 1)
		bad("a send on USER did not call its handler");
	expect_comm = sub;
	expect_code = MPI_ERR_OTHER;
	if (MPI_Comm_call_errhandler(sub, MPI_ERR_OTHER) != MPI_SUCCESS || calls != before + 2)
		bad("MPI_Comm_call_errhandler on SUB");
	expect_comm = MPI_COMM_NULL;

	file_error(feh, path);
	truncated();
}

int main(int argc, char **argv)
{
	int iters, ms, total = 0;
	MPI_Comm dup;
	MPI_Errhandler eh, feh;
	char path[256];

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc > 1 && !strcmp(argv[1], "badcomm")) {
		static char junk[64];
		int ret, cls = -1;

		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
#ifdef OPEN_MPI
		ret = MPI_Comm_dup((MPI_Comm)(void *)junk, &dup);
#else
		(void)junk;
		ret = MPI_Comm_dup((MPI_Comm)0x12345678, &dup);
#endif
		MPI_Error_class(ret, &cls);
		printf("rank %d: MPI_Comm_dup of no communicator: class %s\n", rank,
		       cls == MPI_ERR_COMM ? "MPI_ERR_COMM" : "other");
		MPI_Finalize();
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "fatal")) {
		MPI_Comm_dup(MPI_COMM_WORLD, &dup);
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == 1) {
			int v = 1;

			MPI_Send(&v, 1, MPI_INT, size, 0, dup);
			printf("survived\n");
			fflush(stdout);
		}
		sleep(5);
		MPI_Finalize();
		return 0;
	}
	iters = argc > 1 ? atoi(argv[1]) : 10;
	ms = argc > 2 ? atoi(argv[2]) : 100;
	/* a name of this job's: OMPIO names a semaphore after it, and one a
	 * killed job left behind would hang this one (tests/split/split_common.py) */
	snprintf(path, sizeof(path), "errh-%d-%ld.dat", rank, (long)getpid());

	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_dup(MPI_COMM_WORLD, &dup);
	MPI_Comm_dup(MPI_COMM_WORLD, &user_comm);
	MPI_Comm_create_errhandler(on_error, &eh);
	MPI_Comm_set_errhandler(user_comm, eh);
	MPI_Comm_split(user_comm, 0, rank, &sub);
	MPI_File_create_errhandler(on_file_error, &feh);
	MPI_File_set_errhandler(MPI_FILE_NULL, feh);

	for (it = 0; it < iters; it++) {
		struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

		iteration(dup, eh, feh, path);
		if (rank == 0) {
			printf("rank 0 iteration %d\n", it);
			fflush(stdout);
		}
		nanosleep(&ts, NULL);
	}
	if (calls != (rank == 1 ? 3 : 2) * iters || file_calls != iters)
		bad("handler calls");
	MPI_Allreduce(&calls, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d calls=%d\n", size, iters, total);
	unlink(path);
	MPI_Errhandler_free(&eh);
	MPI_Errhandler_free(&feh);
	MPI_Finalize();
	return 0;
}
