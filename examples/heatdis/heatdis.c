/* heatdis.c - 2-D heat diffusion, the demonstration application of Stasis.
 *
 * A Jacobi stencil on a (ranks * rows-per-rank) x cols grid split by rows
 * across ranks. The top edge is held at HOT, the other edges at 0; every
 * interior cell becomes the mean of its four neighbours each iteration.
 * Neighbouring ranks swap one halo row each way per iteration
 * (MPI_Sendrecv), and every RESIDUAL_EVERY iterations the ranks agree on the
 * residual (MPI_Allreduce).
 *
 * Stasis protects two things: the iteration counter and this rank's rows of
 * the grid (a distributed array, so a GLOBAL checkpoint could be read back
 * by another number of ranks). Halo rows are not protected: each iteration
 * starts by refreshing them from the neighbours, and the halo row that has
 * no neighbour is never read, so the recovered state gives the same
 * floating-point operations, in the same order, as an uninterrupted run:
 * the final grid is bit-identical. Each cell's update depends only on its
 * neighbours, never on the decomposition, so the grid is also the same
 * whatever the number of ranks (tests/mpi compares an MPI run with the
 * serial build).
 *
 * Built with -DHEATDIS_SERIAL it uses no MPI at all (stasis_init_serial),
 * one process holding the whole grid. docs/heatdis.md describes the options
 * and how tests/mpi kills and restarts it.
 */
#ifdef HEATDIS_SERIAL
#ifndef STASIS_NO_MPI
#define STASIS_NO_MPI
#endif
#else
#include <mpi.h>
#endif
#include <stasis.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOT            100.0
#define RESIDUAL_EVERY 10

/* Protected region ids. */
#define ID_STEP 0
#define ID_GRID 1

struct options {
	long rows;		/* rows per rank */
	long cols;
	long iterations;
	long every;		/* checkpoint every this many iterations; 0: never */
	int level;
	long kill_rank;		/* -1: nobody */
	long kill_iteration;
	const char *output;
	const char *config;
};

struct grid {
	int rank, size;
	long rows, cols;	/* this rank's rows, without halos */
	long global_rows;
	long first_row;		/* global index of this rank's first row */
	double *u;		/* (rows + 2) x cols: halo, rows, halo */
	double *unew;
};

static int my_rank;

/* ---- the little MPI this program needs, or nothing in the serial build ---- */

#ifdef HEATDIS_SERIAL
static void par_init(int *argc, char ***argv, int *rank, int *size)
{
	(void)argc;
	(void)argv;
	*rank = 0;
	*size = 1;
}

static void par_finalize(void) {}

static _Noreturn void par_abort(int code)
{
	exit(code);
}

static double par_sum(double local)
{
	return local;
}

static void par_halo_exchange(struct grid *g)
{
	(void)g;		/* one rank: no neighbours */
}

static int par_gather(const struct grid *g, double *all)
{
	memcpy(all, g->u + g->cols, (size_t)(g->rows * g->cols) * sizeof(double));
	return 0;
}
#else
static void par_init(int *argc, char ***argv, int *rank, int *size)
{
	MPI_Init(argc, argv);
	MPI_Comm_rank(MPI_COMM_WORLD, rank);
	MPI_Comm_size(MPI_COMM_WORLD, size);
}

static void par_finalize(void)
{
	MPI_Finalize();
}

static _Noreturn void par_abort(int code)
{
	MPI_Abort(MPI_COMM_WORLD, code);
	exit(code);		/* MPI_Abort does not return; the compiler cannot know */
}

static double par_sum(double local)
{
	double sum;

	MPI_Allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	return sum;
}

/* Row 0 receives the upper neighbour's last row, row rows+1 the lower
 * neighbour's first; the edge ranks talk to MPI_PROC_NULL, which leaves the
 * unused halo alone. */
static void par_halo_exchange(struct grid *g)
{
	int up = g->rank > 0 ? g->rank - 1 : MPI_PROC_NULL;
	int down = g->rank < g->size - 1 ? g->rank + 1 : MPI_PROC_NULL;
	int n = (int)g->cols;
	double *first = g->u + g->cols, *last = g->u + g->rows * g->cols;

	MPI_Sendrecv(first, n, MPI_DOUBLE, up, 0, last + g->cols, n, MPI_DOUBLE, down, 0,
		     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	MPI_Sendrecv(last, n, MPI_DOUBLE, down, 1, g->u, n, MPI_DOUBLE, up, 1,
		     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static int par_gather(const struct grid *g, double *all)
{
	int n = (int)(g->rows * g->cols);

	return MPI_Gather(g->u + g->cols, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0,
			  MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -EIO;
}
#endif

/* ---- errors ---- */

static void report_stasis(const char *call, int ret)
{
	const char *msg = stasis_strerror(ret);

	/* The library's message may already name the call. */
	if (!strncmp(msg, call, strlen(call)) && msg[strlen(call)] == ':')
		fprintf(stderr, "heatdis: rank %d: %s\n", my_rank, msg);
	else
		fprintf(stderr, "heatdis: rank %d: %s: %s\n", my_rank, call, msg);
}

static _Noreturn void die_stasis(const char *call, int ret)
{
	report_stasis(call, ret);
	par_abort(1);
}

/* For a failure every rank gets alike (a checkpoint's outcome is agreed):
 * end together. MPI_Abort would let the launcher kill the job before it
 * forwards the ranks' messages (MPICH's Hydra can lose every one). */
static _Noreturn void die_stasis_together(const char *call, int ret)
{
	report_stasis(call, ret);
	par_finalize();
	exit(1);
}

/* ---- options ---- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: heatdis [OPTIONS]\n"
		"2-D heat diffusion (Jacobi) on a grid split by rows across ranks,\n"
		"checkpointed with Stasis; restarts from the latest checkpoint by itself.\n"
		"\n"
		"  --rows-per-rank R     rows of the grid on each rank (default 64)\n"
		"  --cols C              columns of the grid, at least 3 (default 256)\n"
		"  --iterations N        iterations to run (default 400)\n"
		"  --checkpoint-every K  checkpoint after every K iterations; 0: never (default 0)\n"
		"  --level L             single, partner, rs, global or auto (default auto)\n"
		"  --kill-rank r         rank r kills itself with SIGKILL at the start of\n"
		"  --kill-iteration i    iteration i (0-based), unless the run is a restart,\n"
		"                        once every rank's checkpoints have all their copies\n"
		"  --output FILE         rank 0 writes the final grid there, raw native doubles\n"
		"  --config FILE         Stasis configuration file (default: the usual search)\n"
		"  --help                print this and exit\n"
		"\n"
		"Prints \"heatdis: restarted at iteration I\" after a recovery and\n"
		"\"heatdis: done iterations=N residual=R\" at the end (rank 0).\n");
}

static int parse_long(const char *opt, const char *arg, long min, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > INT_MAX) {
		if (my_rank == 0)
			fprintf(stderr, "heatdis: %s: expected an integer from %ld to %d, got '%s'\n",
				opt, min, INT_MAX, arg);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_level(const char *arg, int *level)
{
	static const struct {
		const char *name;
		int level;
	} levels[] = {
		{ "single", STASIS_LEVEL_SINGLE }, { "partner", STASIS_LEVEL_PARTNER },
		{ "rs", STASIS_LEVEL_RS }, { "global", STASIS_LEVEL_GLOBAL },
		{ "auto", STASIS_LEVEL_AUTO },
	};

	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		if (!strcmp(arg, levels[i].name)) {
			*level = levels[i].level;
			return 0;
		}
	}
	if (my_rank == 0)
		fprintf(stderr, "heatdis: --level: expected single, partner, rs, global or auto, got '%s'\n",
			arg);
	return -EINVAL;
}

/* Returns 0 to run, 1 after --help, -EINVAL after a one-line error (printed
 * by rank 0 only: every rank parses the same arguments). */
static int parse_options(int argc, char **argv, int size, struct options *o)
{
	enum { OPT_ROWS = 256, OPT_COLS, OPT_ITER, OPT_EVERY, OPT_LEVEL, OPT_KRANK, OPT_KITER,
	       OPT_OUTPUT, OPT_CONFIG, OPT_HELP };
	static const struct option longopts[] = {
		{ "rows-per-rank", required_argument, NULL, OPT_ROWS },
		{ "cols", required_argument, NULL, OPT_COLS },
		{ "iterations", required_argument, NULL, OPT_ITER },
		{ "checkpoint-every", required_argument, NULL, OPT_EVERY },
		{ "level", required_argument, NULL, OPT_LEVEL },
		{ "kill-rank", required_argument, NULL, OPT_KRANK },
		{ "kill-iteration", required_argument, NULL, OPT_KITER },
		{ "output", required_argument, NULL, OPT_OUTPUT },
		{ "config", required_argument, NULL, OPT_CONFIG },
		{ "help", no_argument, NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 },
	};
	int c, ret = 0;

	*o = (struct options){ .rows = 64, .cols = 256, .iterations = 400, .every = 0,
			       .level = STASIS_LEVEL_AUTO, .kill_rank = -1, .kill_iteration = -1 };
	opterr = 0;		/* our own one-line messages, from rank 0 only */
	while (!ret && (c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_ROWS: ret = parse_long("--rows-per-rank", optarg, 1, &o->rows); break;
		case OPT_COLS: ret = parse_long("--cols", optarg, 3, &o->cols); break;
		case OPT_ITER: ret = parse_long("--iterations", optarg, 0, &o->iterations); break;
		case OPT_EVERY: ret = parse_long("--checkpoint-every", optarg, 0, &o->every); break;
		case OPT_LEVEL: ret = parse_level(optarg, &o->level); break;
		case OPT_KRANK: ret = parse_long("--kill-rank", optarg, 0, &o->kill_rank); break;
		case OPT_KITER: ret = parse_long("--kill-iteration", optarg, 0, &o->kill_iteration); break;
		case OPT_OUTPUT: o->output = optarg; break;
		case OPT_CONFIG: o->config = optarg; break;
		case OPT_HELP:
			if (my_rank == 0)
				usage(stdout);
			return 1;
		default:
			if (my_rank == 0) {
				if (optopt >= OPT_ROWS)	/* a known option without its value */
					fprintf(stderr, "heatdis: option '%s' needs a value (see --help)\n",
						argv[optind - 1]);
				else
					fprintf(stderr, "heatdis: unknown option '%s' (see --help)\n",
						argv[optind - 1]);
			}
			return -EINVAL;
		}
	}
	if (ret)
		return ret;
	if (optind < argc) {
		if (my_rank == 0)
			fprintf(stderr, "heatdis: unexpected argument '%s' (see --help)\n", argv[optind]);
		return -EINVAL;
	}
	if ((o->kill_rank < 0) != (o->kill_iteration < 0)) {
		if (my_rank == 0)
			fprintf(stderr, "heatdis: --kill-rank and --kill-iteration go together\n");
		return -EINVAL;
	}
	if (o->kill_rank >= size) {
		if (my_rank == 0)
			fprintf(stderr, "heatdis: --kill-rank: %ld, but the job has %d rank%s\n",
				o->kill_rank, size, size == 1 ? "" : "s");
		return -EINVAL;
	}
	if ((double)o->rows * size * o->cols > (double)(SIZE_MAX / sizeof(double) / 2) ||
	    o->rows * o->cols > INT_MAX) {
		if (my_rank == 0)
			fprintf(stderr, "heatdis: grid of %ld x %ld per rank is too large\n", o->rows,
				o->cols);
		return -EINVAL;
	}
	return 0;
}

/* ---- the computation ---- */

static int grid_alloc(struct grid *g, const struct options *o, int rank, int size)
{
	size_t n = (size_t)(o->rows + 2) * (size_t)o->cols;

	g->rank = rank;
	g->size = size;
	g->rows = o->rows;
	g->cols = o->cols;
	g->global_rows = o->rows * size;
	g->first_row = o->rows * rank;
	g->u = calloc(n, sizeof(double));
	g->unew = calloc(n, sizeof(double));
	if (!g->u || !g->unew) {
		fprintf(stderr, "heatdis: rank %d: out of memory for %zu doubles\n", rank, 2 * n);
		return -ENOMEM;
	}
	if (g->first_row == 0) {
		for (long j = 0; j < g->cols; j++)
			g->u[g->cols + j] = HOT;	/* the top edge of the whole grid */
	}
	return 0;
}

static int is_fixed_row(const struct grid *g, long i)
{
	long global = g->first_row + i - 1;

	return global == 0 || global == g->global_rows - 1;
}

/* One Jacobi sweep over this rank's rows (halos fresh); returns the sum of
 * squared changes on this rank. Edge cells are copied unchanged. */
static double jacobi_step(struct grid *g)
{
	long c = g->cols;
	double diff = 0.0;

	for (long i = 1; i <= g->rows; i++) {
		const double *up = g->u + (i - 1) * c, *row = g->u + i * c, *down = g->u + (i + 1) * c;
		double *out = g->unew + i * c;

		if (is_fixed_row(g, i)) {
			memcpy(out, row, (size_t)c * sizeof(double));
			continue;
		}
		out[0] = row[0];
		out[c - 1] = row[c - 1];
		for (long j = 1; j < c - 1; j++) {
			out[j] = 0.25 * (up[j] + down[j] + row[j - 1] + row[j + 1]);
			diff += (out[j] - row[j]) * (out[j] - row[j]);
		}
	}
	/* Copy rather than swap: the protected region stays at one address. */
	memcpy(g->u + c, g->unew + c, (size_t)(g->rows * c) * sizeof(double));
	return diff;
}

static int write_output(const char *path, const double *all, size_t n)
{
	FILE *f = fopen(path, "wb");

	if (!f) {
		fprintf(stderr, "heatdis: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	if (fwrite(all, sizeof(double), n, f) != n || fflush(f) || ferror(f)) {
		fprintf(stderr, "heatdis: %s: write failed: %s\n", path, strerror(errno));
		fclose(f);
		return -EIO;
	}
	if (fclose(f)) {
		fprintf(stderr, "heatdis: %s: %s\n", path, strerror(errno));
		return -EIO;
	}
	return 0;
}

/* Rank 0 gathers every rank's rows, in rank order, and writes them. */
static int output_grid(const struct grid *g, const char *path)
{
	size_t n = (size_t)(g->global_rows * g->cols);
	double *all = NULL;
	int ret;

	if (g->rank == 0 && !(all = malloc(n * sizeof(double)))) {
		fprintf(stderr, "heatdis: out of memory for the output grid\n");
		return -ENOMEM;
	}
	ret = par_gather(g, all);
	if (!ret && g->rank == 0)
		ret = write_output(path, all, n);
	free(all);
	return ret;
}

static void stasis_setup(const struct options *o, struct grid *g, int *step)
{
	int ret;

#ifdef HEATDIS_SERIAL
	ret = stasis_init_serial(o->config);
#else
	ret = stasis_init(MPI_COMM_WORLD, o->config);
#endif
	if (ret)
		die_stasis("stasis_init", ret);
	ret = stasis_protect(ID_STEP, step, 1, STASIS_INT);
	if (ret)
		die_stasis("stasis_protect", ret);
	ret = stasis_protect_distributed(ID_GRID, g->u + g->cols, (size_t)(g->rows * g->cols),
					 STASIS_DOUBLE, (size_t)(g->global_rows * g->cols),
					 (size_t)(g->first_row * g->cols));
	if (ret)
		die_stasis("stasis_protect_distributed", ret);
}

int main(int argc, char **argv)
{
	struct options o;
	struct grid g = { 0 };
	int rank, size, ret, restarted, stop = 0;
	int step = 0;		/* iterations completed; protected */
	double residual = 0.0;

	par_init(&argc, &argv, &rank, &size);
	my_rank = rank;
	ret = parse_options(argc, argv, size, &o);
	if (ret) {
		par_finalize();
		return ret > 0 ? 0 : 2;
	}
	if (grid_alloc(&g, &o, rank, size))
		par_abort(1);

	stasis_setup(&o, &g, &step);
	restarted = stasis_status() == STASIS_RESTARTED;
	if (restarted) {
		ret = stasis_recover();
		if (ret)
			die_stasis("stasis_recover", ret);
		if (rank == 0)
			printf("heatdis: restarted at iteration %d\n", step);
		fflush(stdout);
	}

	while (step < o.iterations) {
		double diff;

		if (!restarted && step == o.kill_iteration) {
			/* the failure strikes once every checkpoint has all its
			 * copies, so a test knows what is on disk (kills during
			 * an upgrade are the fault walk's: tests/mpi) */
			ret = stasis_checkpoint_wait();
			if (ret < 0)
				die_stasis("stasis_checkpoint_wait", ret);
			par_sum(0);     /* every rank's upgrades, not only this one's */
			if (rank == o.kill_rank)
				raise(SIGKILL);
		}
		par_halo_exchange(&g);
		diff = jacobi_step(&g);
		step++;
		if (step % RESIDUAL_EVERY == 0 || step == o.iterations)
			residual = sqrt(par_sum(diff));
		if (o.every > 0 && step % o.every == 0 && step < o.iterations) {
			ret = stasis_checkpoint(o.level);
			if (ret < 0)
				die_stasis_together("stasis_checkpoint", ret);
			/* asked to stop (the halt file; stasis migrate): a rerun
			 * starts from the checkpoint just taken */
			ret = stasis_should_exit(&stop);
			if (ret < 0)
				die_stasis("stasis_should_exit", ret);
			if (stop)
				break;
		}
	}
	if (stop) {
		if (rank == 0)
			printf("heatdis: stopped at iteration %d\n", step);
	} else {
		if (o.output && output_grid(&g, o.output))
			par_abort(1);
		if (rank == 0)
			printf("heatdis: done iterations=%d residual=%.17g\n", step, residual);
	}
	ret = stasis_finalize();
	if (ret)
		die_stasis("stasis_finalize", ret);
	free(g.u);
	free(g.unew);
	par_finalize();
	return 0;
}
