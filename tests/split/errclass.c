/* errclass.c - error classes, codes and strings the program adds before
 * the loop (tests/split).
 *
 *   errclass ITERATIONS SLEEP_MS
 *
 * (Not checked, where the MPIs differ natively: MPI_Error_class of an added
 * class, 14 in Open MPI 4.1, and the string of a code with none added,
 * MPICH's text for its class; Stasis answers the class and "", MPI-3.1
 * 8.5.) Before the loop each rank adds a class (MPI_Add_error_class), a code of
 * it and a code of MPI_ERR_OTHER (MPI_Add_error_code), a string for the
 * first code and one for the class (MPI_Add_error_string), and sets an
 * error handler of its own on a duplicate of MPI_COMM_WORLD. Every
 * iteration checks MPI_Error_class and MPI_Error_string of each, that
 * MPI_LASTUSEDCODE is the last code, that MPI_Comm_call_errhandler with
 * the first code calls the handler with it, and that a predefined class's
 * string is still the MPI's; then it sleeps SLEEP_MS. The classes and
 * codes live in the upper half: a restart, under either MPI, keeps them.
 * At the end rank 0 prints "PASS ranks=N iterations=I checks=K". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fail.h"

static int rank, it, seen;
static long checks;

/* one check, counted */
static void eq(const char *what, long got, long want)
{
	fail_unless(rank, it, what, got, want);
	checks++;
}

static void handler(MPI_Comm *c, int *code, ...)
{
	(void)c;
	seen = *code;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 5, ms = argc > 2 ? atoi(argv[2]) : 100, size;
	struct timespec nap = { ms / 1000, (ms % 1000) * 1000000L };
	int cls, code, other, c, len, flag, *last;
	char text[MPI_MAX_ERROR_STRING];
	MPI_Errhandler eh;
	MPI_Comm dup;
	long total = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Add_error_class(&cls);
	MPI_Add_error_code(cls, &code);
	MPI_Add_error_code(MPI_ERR_OTHER, &other);
	MPI_Add_error_string(code, "stasis: the first code");
	MPI_Add_error_string(cls, "stasis: the class");
	MPI_Comm_dup(MPI_COMM_WORLD, &dup);
	MPI_Comm_create_errhandler(handler, &eh);
	MPI_Comm_set_errhandler(dup, eh);

	for (it = 0; it < iters; it++) {
		printf("rank %d iteration %d\n", rank, it);
		fflush(stdout);
		eq("class above MPI_ERR_LASTCODE", cls > MPI_ERR_LASTCODE, 1);
		MPI_Error_class(code, &c);
		eq("class of the code", c, cls);
		MPI_Error_class(other, &c);
		eq("class of the other code", c, MPI_ERR_OTHER);
		MPI_Error_string(code, text, &len);
		eq("string of the code", strcmp(text, "stasis: the first code") == 0 && len == 22, 1);
		MPI_Error_string(cls, text, &len);
		eq("string of the class", strcmp(text, "stasis: the class"), 0);
		MPI_Error_string(MPI_ERR_TRUNCATE, text, &len);
		eq("a predefined class's string", len > 0 && strcmp(text, "stasis: the class"), 1);
		MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag);
		eq("MPI_LASTUSEDCODE at least the last code", flag && *last >= other, 1);
		seen = 0;
		MPI_Comm_call_errhandler(dup, code);
		eq("the handler's code", seen, code);
		nanosleep(&nap, NULL);
	}
	MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS ranks=%d iterations=%d checks=%ld\n", size, iters, total);
	MPI_Comm_free(&dup);
	MPI_Errhandler_free(&eh);
	MPI_Finalize();
	return 0;
}
