/* cmd_proc.c - transparent checkpoints of unmodified programs: run,
 * checkpoint, restart, status. The work is in coord/ and proc/. */
#include "cli/cli.h"
#include "common/config.h"
#include "common/err.h"
#include "common/log.h"
#include "coord/coord.h"
#include "coord/job.h"
#include "store/store.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* parse()'s `allowed` names options by letter: a for OPT_DIR, b for the next... */
enum { OPT_DIR = 1000, OPT_INTERVAL, OPT_JOB, OPT_STOP, OPT_NO_SIGNAL, OPT_LAUNCHER, OPT_RESUME,
       OPT_WAIT, OPT_JSON, OPT_RECOVER, OPT_MAX_RESTARTS, OPT_SPARES, OPT_LAZY, OPT_STANDBY };

/* 'z' in parse()'s allowed, apart from the letters in order above */
enum { OPT_LEVEL = OPT_DIR + 25 };

static const struct option proc_options[] = {
	{ "dir", required_argument, NULL, OPT_DIR },
	{ "interval", required_argument, NULL, OPT_INTERVAL },
	{ "job", required_argument, NULL, OPT_JOB },
	{ "stop", no_argument, NULL, OPT_STOP },
	{ "no-signal-checkpoint", no_argument, NULL, OPT_NO_SIGNAL },
	{ "launcher", required_argument, NULL, OPT_LAUNCHER },
	{ "resume", no_argument, NULL, OPT_RESUME },
	{ "wait", required_argument, NULL, OPT_WAIT },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "level", required_argument, NULL, OPT_LEVEL },
	{ "recover", required_argument, NULL, OPT_RECOVER },
	{ "max-restarts", required_argument, NULL, OPT_MAX_RESTARTS },
	{ "spares", required_argument, NULL, OPT_SPARES },
	{ "lazy", no_argument, NULL, OPT_LAZY },
	{ "standby", no_argument, NULL, OPT_STANDBY },
	{ NULL, 0, NULL, 0 },
};

struct proc_args {
	const char *dir, *job, *interval, *launcher, *wait, *recover, *max_restarts, *spares;
	const char *level;        /* --level */
	int stop, no_signal, resume, json, lazy, standby;
	int first_operand;
};

static int parse(const char *cmd, int argc, char **argv, struct proc_args *a, const char *allowed)
{
	/* run stops at its program's name; the others take options anywhere
	 * (`stasis restart --dir D JOB --launcher "..."`) */
	const char *order = strcmp(cmd, "run") ? "" : "+";
	int c;

	memset(a, 0, sizeof(*a));
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, order, proc_options, NULL)) != -1) {
		if (c == '?' || !strchr(allowed, c - OPT_DIR + 'a')) {
			cli_error(cmd, "unknown option '%s' (see `stasis %s --help`)", argv[optind - 1], cmd);
			return EXIT_USAGE;
		}
		switch (c) {
		case OPT_DIR: a->dir = optarg; break;
		case OPT_INTERVAL: a->interval = optarg; break;
		case OPT_JOB: a->job = optarg; break;
		case OPT_STOP: a->stop = 1; break;
		case OPT_NO_SIGNAL: a->no_signal = 1; break;
		case OPT_LAUNCHER: a->launcher = optarg; break;
		case OPT_RESUME: a->resume = 1; break;
		case OPT_WAIT: a->wait = optarg; break;
		case OPT_JSON: a->json = 1; break;
		case OPT_LEVEL: a->level = optarg; break;
		case OPT_RECOVER: a->recover = optarg; break;
		case OPT_MAX_RESTARTS: a->max_restarts = optarg; break;
		case OPT_SPARES: a->spares = optarg; break;
		case OPT_LAZY: a->lazy = 1; break;
		case OPT_STANDBY: a->standby = 1; break;
		}
	}
	a->first_operand = optind;
	return EXIT_OK;
}

/* "90", "90s", "15m", "2h" -> milliseconds */
static int parse_interval(const char *s, uint64_t *ms)
{
	char *end;
	unsigned long long v;
	uint64_t unit = 1000;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (*end == 's')
		end++;
	else if (*end == 'm')
		unit = 60000, end++;
	else if (*end == 'h')
		unit = 3600000, end++;
	if (*end || v == 0 || v > 1000000000ull)
		return -EINVAL;
	*ms = v * unit;
	return 0;
}

/* option opt's text (NULL: not given) as a number from 0 to max into *v */
static int count_arg(const char *cmd, const char *opt, const char *text, unsigned long max,
		     unsigned *v)
{
	unsigned long n;
	char *end;

	if (!text)
		return EXIT_OK;
	errno = 0;
	n = strtoul(text, &end, 10);
	if (errno || end == text || *end || text[0] == '-' || n > max) {
		cli_error(cmd, "bad %s '%s' (a number from 0 to %lu)", opt, text, max);
		return EXIT_USAGE;
	}
	*v = (unsigned)n;
	return EXIT_OK;
}

/* --recover, --max-restarts and --spares over the keys recover,
 * max_restarts and spares */
static int recovery_opts(const char *cmd, const struct proc_args *a, struct coord_opts *o)
{
	o->recover = a->recover ? a->recover : cfg_str(CFG_RECOVER);
	if (strcmp(o->recover, "none") && strcmp(o->recover, "auto")) {
		cli_error(cmd, "bad --recover '%s' (none or auto)", o->recover);
		return EXIT_USAGE;
	}
	o->max_restarts = (unsigned)cfg_u64(CFG_MAX_RESTARTS);
	o->heartbeat_timeout_ms = cfg_u64(CFG_HEARTBEAT_TIMEOUT);
	o->spares = (unsigned)cfg_u64(CFG_SPARES);
	if (count_arg(cmd, "--max-restarts", a->max_restarts, 1000, &o->max_restarts) != EXIT_OK ||
	    count_arg(cmd, "--spares", a->spares, 4096, &o->spares) != EXIT_OK)
		return EXIT_USAGE;
	return EXIT_OK;
}

/* The coordinator's options of run, restart and standby for job under root */
static int job_opts(const char *cmd, const struct proc_args *a, const char *root, const char *job,
		    struct coord_opts *o)
{
	o->root = root;
	o->tier = cfg_str(CFG_TIER);
	o->job = job;
	o->signal_checkpoint = !a->no_signal;
	o->launcher = a->launcher;
	return recovery_opts(cmd, a, o);
}

static int job_name_ok(const char *job)
{
	return job[0] && job[0] != '.' && !strchr(job, '/') && strlen(job) < 128;
}

static int exit_with(int ret, int status, const char *cmd)
{
	if (ret == -ECANCELED)
		return EXIT_FAIL;   /* the restorer already said why */
	if (ret) {
		cli_error(cmd, "%s", *err_msg() ? err_msg() : strerror(-ret));
		return EXIT_FAIL;
	}
	return status;
}

/* coord_restart with a progress line on a terminal until every rank runs
 * again (the line is gone before the restart's own messages at its end) */
static int restart_one(const struct coord_opts *o, const char *ckpt, int *status)
{
	struct cli_progress *progress = cli_progress_restart(o->root, o->job, ckpt);
	int ret = coord_restart(o, ckpt, status);

	cli_progress_stop(&progress);
	return ret;
}

/* The checkpoint a restart without a name picks (*chosen, its level in
 * *level, 32 bytes), the newest older one in the global tier (*older, ""
 * if none) and the file where the ranks say which copies they lack
 * (coord/job.h) */
static void restart_choices(const struct coord_opts *o, char *chosen, char *level, char *older,
			    size_t len, char *missing, size_t mlen)
{
	struct store_ckpt_info *list = NULL;
	struct store *s = NULL;
	size_t count = 0;

	chosen[0] = level[0] = older[0] = missing[0] = 0;
	if (store_open(o->tier, o->root, o->job, &s) != 0)
		return;
	snprintf(missing, mlen, "%s/" JOB_MISSING_FILE, store_job_dir(s));
	if (store_select(s, chosen, len) == 0 && store_list(s, &list, &count, NULL) == 0)
		for (size_t i = 0; i < count; i++) {
			if (!strcmp(list[i].name, chosen)) {
				snprintf(level, 32, "%s", list[i].level);
				break;
			}
			if (list[i].state == STORE_COMPLETE && job_level_in_global(list[i].level))
				snprintf(older, len, "%s", list[i].name);
		}
	free(list);
	store_close(&s);
	err_clear();
}

/* A restart. Without a checkpoint named, when the one picked is staged and
 * not yet in the global tier and some rank finds no copy of its image (a
 * node lost, or the job brought back on other nodes), the newest older
 * checkpoint in the global tier is restarted instead (docs/split.md,
 * "Node-local staging") */
/* A checkpoint named for a restart is one to restart from: not FAILED, not
 * PARTIAL (being written, or its writer died); 0, or -EINVAL with a line */
static int restartable(const struct coord_opts *o, const char *ckpt)
{
	struct store *s = NULL;
	struct store_ckpt_info *list = NULL;
	size_t count = 0;
	int ret = 0;

	if (store_open(o->tier, o->root, o->job, &s) != 0 || store_list(s, &list, &count, NULL) != 0) {
		if (s)
			store_close(&s);
		return 0;   /* the restart itself says what is wrong with the store */
	}
	for (size_t i = 0; i < count; i++) {
		if (strcmp(list[i].name, ckpt) != 0 || list[i].state == STORE_COMPLETE)
			continue;
		if (list[i].state == STORE_FAILED)
			ret = err_set(-EINVAL, "%s of job %s failed (%s): restart an established "
				      "checkpoint (stasis ls)", ckpt, o->job, list[i].reason);
		else
			ret = err_set(-EINVAL, "%s of job %s was never established (being written, "
				      "or its writer died): restart an established checkpoint "
				      "(stasis ls)", ckpt, o->job);
	}
	free(list);
	store_close(&s);
	return ret;
}

static int restart(const struct coord_opts *o, const char *ckpt, int *status)
{
	char chosen[128], level[32], older[128], missing[PATH_MAX];
	int ret, fallback;

	restart_choices(o, chosen, level, older, sizeof(chosen), missing, sizeof(missing));
	if (missing[0])
		unlink(missing);
	if (ckpt) {
		ret = restartable(o, ckpt) ? -EINVAL : restart_one(o, ckpt, status);
		if (missing[0])
			unlink(missing);   /* a checkpoint named is never replaced */
		return ret;
	}
	ret = restart_one(o, NULL, status);
	fallback = chosen[0] && !job_level_in_global(level) && missing[0] &&
		   job_copies_missing(missing, chosen);
	if (missing[0])
		unlink(missing);   /* read: the ranks' word of this restart */
	if (!fallback)
		return ret;
	if (!older[0]) {
		log_warn("restart: %s is at level %s and some of its ranks' nodes no longer hold "
			 "their copies; no older checkpoint reached level global", chosen, level);
		return ret;
	}
	log_warn("restart: %s is at level %s and some of its ranks' nodes no longer hold their "
		 "copies: restarting from %s (level global)", chosen, level, older);
	*status = 0;
	err_clear();
	ret = restart_one(o, older, status);
	unlink(missing);
	return ret;
}

/* --resume: the job has an established checkpoint to restart from (one
 * line at info level says which way it goes) */
static int resumable(const struct coord_opts *o)
{
	struct store *s = NULL;
	char name[128];
	int ok;

	ok = store_open(o->tier, o->root, o->job, &s) == 0 && store_select(s, name, sizeof(name)) == 0;
	if (s)
		store_close(&s);
	if (ok)
		log_info("run --resume: job %s restarts from %s", o->job, name);
	else
		log_info("run --resume: job %s has no established checkpoint: starting it", o->job);
	return ok;
}

int cmd_run(int argc, char **argv)
{
	struct coord_opts o;
	struct proc_args a;
	char jobbuf[NAME_MAX + 1], progbuf[PATH_MAX];
	const char *root;
	int status = 0, ret;

	if ((ret = parse("run", argc, argv, &a, "abcefgjklz")) != EXIT_OK)
		return ret;
	/* the level of the job's checkpoints: the coordinator and its node
	 * agents read the key (docs/levels.md) */
	if (a.level && cfg_set("level", a.level) != 0) {
		cli_error("run", "bad --level '%s' (single, partner, rs or global)", a.level);
		return EXIT_USAGE;
	}
	if (a.launcher && !a.resume) {
		cli_error("run", "--launcher goes with --resume (or `stasis restart`)");
		return EXIT_USAGE;
	}
	if (a.first_operand >= argc) {
		cli_error("run", "no program given (usage: stasis run [--dir D] [--interval T] -- PROGRAM ARGS...)");
		return EXIT_USAGE;
	}
	memset(&o, 0, sizeof(o));
	if (a.interval && parse_interval(a.interval, &o.interval_ms) != 0) {
		cli_error("run", "bad --interval '%s' (a number of seconds, or with suffix s, m or h)",
			  a.interval);
		return EXIT_USAGE;
	}
	root = cli_root(a.dir);
	if (!a.job && cfg_str(CFG_JOB)[0])
		a.job = cfg_str(CFG_JOB);
	if (!a.job) {
		/* an MPI job is named after its program, not its launcher */
		int prog = job_is_launcher(argv[a.first_operand])
				   ? job_program_index(argv + a.first_operand) : 0;

		snprintf(progbuf, sizeof(progbuf), "%s", argv[a.first_operand + (prog > 0 ? prog : 0)]);
		snprintf(jobbuf, sizeof(jobbuf), "%s", basename(progbuf));
		a.job = jobbuf;
	}
	if (!job_name_ok(a.job)) {
		cli_error("run", "bad job name '%s'", a.job);
		return EXIT_USAGE;
	}
	if (mkdir(root, 0700) != 0 && errno != EEXIST) {
		cli_error("run", "cannot create the checkpoint directory %s: %s", root, strerror(errno));
		return EXIT_FAIL;
	}
	/* (--launcher goes with --resume: refused above without it) */
	if ((ret = job_opts("run", &a, root, a.job, &o)) != EXIT_OK)
		return ret;
	if (a.resume && resumable(&o)) {
		ret = restart(&o, NULL, &status);
		return exit_with(ret, status, "run");
	}
	ret = coord_run(&o, argv + a.first_operand, &status);
	return exit_with(ret, status, "run");
}

/* Jobs under root with a running coordinator. */
static int running_jobs(const char *root, char ***names, size_t *count, size_t *running, char *only,
			size_t len)
{
	int ret = store_jobs(cfg_str(CFG_TIER), root, names, count);

	*running = 0;
	if (ret)
		return ret;
	for (size_t i = 0; i < *count; i++) {
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/%s", root, (*names)[i]);
		if (coord_alive(path)) {
			(*running)++;
			snprintf(only, len, "%s", (*names)[i]);
		}
	}
	return 0;
}

/* The index is looked at every WAIT_STEP_MS: a level comes tens of ms after
 * the seal, and a 100 ms step added 50 ms on average to `--wait partner`;
 * it is read again only when it grew or was written (it is append-only: a
 * level is a record; reading 1,000 checkpoints of 64 ranks costs 52 ms of
 * CPU). The coordinator is asked whether the job still runs every WAIT_ASK
 * steps */
#define WAIT_STEP_MS 10
#define WAIT_ASK 10

/* --wait global: until checkpoint name of job reached level global (a
 * checkpoint that was not staged is there at once), or the job is gone */
static int wait_global(const char *root, const char *job, const char *name, const char *want)
{
	char dir[PATH_MAX], reply[256];

	char index[PATH_MAX + 8];
	struct stat seen = { 0 };

	snprintf(dir, sizeof(dir), "%s/%s", root, job);
	snprintf(index, sizeof(index), "%s/index", dir);
	for (unsigned step = 0;; step++) {
		struct store *s = NULL;
		struct store_ckpt_info *list = NULL;
		size_t count = 0;
		int found = 0, global = 0;
		struct stat now;

		if (stat(index, &now) == 0) {
			if (step > 0 && now.st_size == seen.st_size && now.st_ino == seen.st_ino &&
			    now.st_mtim.tv_sec == seen.st_mtim.tv_sec &&
			    now.st_mtim.tv_nsec == seen.st_mtim.tv_nsec)
				goto unchanged;
			seen = now;
		}
		if (store_open(NULL, root, job, &s) == 0 && store_list(s, &list, &count, NULL) == 0)
			for (size_t i = 0; i < count; i++)
				if (!strcmp(list[i].name, name)) {
					found = 1;
					/* "partner+global" has reached both */
					global = strstr(list[i].level, want) != NULL;
				}
		free(list);
		if (s)
			store_close(&s);
		if (!found)
			return err_set(-ENOENT, "%s is not in job %s's index", name, job);
		if (global)
			return 0;
unchanged:
		if (step % WAIT_ASK == WAIT_ASK - 1 &&
		    coord_request(dir, "STATUS", 5000, reply, sizeof(reply)) != 0)
			return strcmp(want, "global") ?
			       err_set(-EIO, "%s did not reach level %s: the job ended before its node "
				       "agents were done", name, want) :
			       err_set(-EIO, "%s stays at level local: the job ended before every "
				       "rank's image was in the global tier", name);
		usleep(WAIT_STEP_MS * 1000);
	}
}

/* The job a client command names (operand, or NULL: the only running
 * job under root) into job; EXIT_OK or the exit status after its message */
static int running_job(const char *cmd, const char *root, const char *operand, char *job,
		       size_t len)
{
	char **names = NULL;
	size_t count = 0, running = 0;
	int ret;

	if (operand) {
		snprintf(job, len, "%s", operand);
	} else {
		ret = running_jobs(root, &names, &count, &running, job, len);
		store_names_free(names, count);
		if (ret || running != 1) {
			if (ret)
				cli_error(cmd, "%s", err_msg());
			else if (running == 0)
				cli_error(cmd, "no running job in %s", root);
			else
				cli_error(cmd, "%zu running jobs in %s; name one", running, root);
			return EXIT_FAIL;
		}
	}
	if (!job_name_ok(job)) {
		cli_error(cmd, "bad job name '%s'", job);
		return EXIT_USAGE;
	}
	return EXIT_OK;
}

/* stasis migrate --node N [--to T] | --rank R [--to T];
 * stasis predict --node N --within DURATION (docs/coordinator.md, Migration) */
static int migrate_cmd(const char *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' }, { "node", required_argument, NULL, 'n' },
		{ "to", required_argument, NULL, 't' }, { "rank", required_argument, NULL, 'r' },
		{ "within", required_argument, NULL, 'w' }, { NULL, 0, NULL, 0 },
	};
	const char *dir_opt = NULL, *node = NULL, *to = NULL, *root;
	char job[NAME_MAX + 1], dir[PATH_MAX], reply[1024], request[256], *end;
	int predict = !strcmp(cmd, "predict"), rank = -1, c, ret;
	uint64_t within = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir_opt = optarg; break;
		case 'n': node = optarg; break;
		case 't': to = optarg; break;
		case 'r':
			rank = (int)strtol(optarg, &end, 10);
			if (*end || rank < 0 || end == optarg) {
				cli_error(cmd, "bad --rank '%s' (a rank number)", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'w':
			if (parse_interval(optarg, &within) != 0) {
				cli_error(cmd, "bad --within '%s' (a duration: 90, 60s, 2m)", optarg);
				return EXIT_USAGE;
			}
			break;
		case ':':
			cli_error(cmd, "option '%s' needs a value", argv[optind - 1]);
			return EXIT_USAGE;
		default:
			cli_error(cmd, "unknown option '%s'", argv[optind - 1]);
			return EXIT_USAGE;
		}
	}
	if (predict ? !node || !within || rank >= 0 || to : (!node) == (rank < 0)) {
		cli_error(cmd, predict ? "usage: stasis predict [--dir D] [JOB] --node N --within DURATION" :
			  "usage: stasis migrate [--dir D] [JOB] --node N | --rank R [--to NODE]");
		return EXIT_USAGE;
	}
	if (optind + 1 < argc) {
		cli_error(cmd, "too many operands");
		return EXIT_USAGE;
	}
	root = cli_root(dir_opt);
	if ((ret = running_job(cmd, root, optind < argc ? argv[optind] : NULL, job, sizeof(job))) !=
	    EXIT_OK)
		return ret;
	snprintf(dir, sizeof(dir), "%s/%s", root, job);
	if (predict)
		snprintf(request, sizeof(request), "PREDICT %.63s %llu", node, (unsigned long long)within);
	else if (rank >= 0)
		snprintf(request, sizeof(request), "MIGRATE - %.63s rank=%d", to ? to : "-", rank);
	else
		snprintf(request, sizeof(request), "MIGRATE %.63s %.63s", node, to ? to : "-");
	ret = coord_request(dir, request, 3600 * 1000, reply, sizeof(reply));
	if (ret) {
		cli_error(cmd, "%s", ret == -EREMOTEIO ? reply : err_msg());
		return EXIT_FAIL;
	}
	printf("%s\n", reply);
	return EXIT_OK;
}

int cmd_migrate(int argc, char **argv)
{
	return migrate_cmd("migrate", argc, argv);
}

int cmd_predict(int argc, char **argv)
{
	return migrate_cmd("predict", argc, argv);
}

int cmd_checkpoint(int argc, char **argv)
{
	struct cli_progress *progress;
	struct proc_args a;
	char job[NAME_MAX + 1], dir[PATH_MAX], reply[1024], request[64];
	const char *root;
	int ret;

	if ((ret = parse("checkpoint", argc, argv, &a, "adhz")) != EXIT_OK)
		return ret;
	if (a.level && strcmp(a.level, "single") && strcmp(a.level, "partner") &&
	    strcmp(a.level, "rs") && strcmp(a.level, "global")) {
		cli_error("checkpoint", "bad --level '%s' (single, partner, rs or global)", a.level);
		return EXIT_USAGE;
	}
	snprintf(request, sizeof(request), "CHECKPOINT%s%s%s", a.stop ? " stop" : "",
		 a.level ? " level=" : "", a.level ? a.level : "");
	if (a.wait && strcmp(a.wait, "local") != 0 && strcmp(a.wait, "global") != 0 &&
	    strcmp(a.wait, "partner") != 0 && strcmp(a.wait, "rs") != 0) {
		cli_error("checkpoint", "bad --wait '%s' (local, partner, rs or global)", a.wait);
		return EXIT_USAGE;
	}
	root = cli_root(a.dir);
	if (a.first_operand + 1 < argc) {
		cli_error("checkpoint", "too many operands (usage: stasis checkpoint [--dir D] [JOB] [--stop])");
		return EXIT_USAGE;
	}
	if ((ret = running_job("checkpoint", root, a.first_operand < argc ? argv[a.first_operand] :
			       NULL, job, sizeof(job))) != EXIT_OK)
		return ret;
	snprintf(dir, sizeof(dir), "%s/%s", root, job);
	progress = cli_progress_checkpoint(root, job);
	ret = coord_request(dir, request, 24 * 3600 * 1000, reply, sizeof(reply));
	cli_progress_stop(&progress);
	if (ret == -EREMOTEIO) {
		cli_error("checkpoint", "%s", reply);
		return EXIT_FAIL;
	}
	if (ret) {
		cli_error("checkpoint", "%s", err_msg());
		return EXIT_FAIL;
	}
	if (a.wait && strcmp(a.wait, "local") && wait_global(root, job, reply, a.wait) != 0) {
		cli_error("checkpoint", "%s", err_msg());
		return EXIT_FAIL;
	}
	printf("%s\n", reply);
	return EXIT_OK;
}

/* --level over the key level, and --interval, of the checkpoints to come
 * (o zeroed first) */
static int level_interval(const char *cmd, const struct proc_args *a, struct coord_opts *o)
{
	if (a->level && cfg_set("level", a->level) != 0) {
		cli_error(cmd, "bad --level '%s' (single, partner, rs or global)", a->level);
		return EXIT_USAGE;
	}
	memset(o, 0, sizeof(*o));
	if (a->interval && parse_interval(a->interval, &o->interval_ms) != 0) {
		cli_error(cmd, "bad --interval '%s' (a number of seconds, or with suffix s, m or h)",
			  a->interval);
		return EXIT_USAGE;
	}
	return EXIT_OK;
}

/* restart's and standby's operand: JOB/CKPT, CKPT (ckpt-NNNNNN) in the
 * only job, or JOB; job[NAME_MAX + 1] and ckpt[128] ("": the latest) */
static int restart_operand(const char *cmd, int argc, char **argv, int first, const char *root,
			   char *job, char *ckpt)
{
	char **names = NULL;
	size_t count = 0;
	int ret;

	if (first + 1 < argc) {
		cli_error(cmd, "too many operands (usage: stasis %s [--dir D] [%s])", cmd,
			  strcmp(cmd, "standby") ? "JOB | JOB/CKPT | CKPT" : "JOB");
		return EXIT_USAGE;
	}
	if (first < argc) {
		/* JOB/CKPT, CKPT (ckpt-NNNNNN) in the only job, or JOB */
		const char *arg = argv[first], *slash = strchr(arg, '/');

		if (slash) {
			snprintf(job, NAME_MAX + 1, "%.*s", (int)(slash - arg), arg);
			snprintf(ckpt, 128, "%s", slash + 1);
		} else if (strncmp(arg, "ckpt-", 5) == 0) {
			snprintf(ckpt, 128, "%s", arg);
		} else {
			snprintf(job, NAME_MAX + 1, "%s", arg);
		}
	}
	if (!job[0]) {
		struct stat st;

		if (stat(root, &st) != 0) {
			cli_error(cmd, "no checkpoint directory %s", root);
			return EXIT_FAIL;
		}
		ret = store_jobs(cfg_str(CFG_TIER), root, &names, &count);
		if (ret || count != 1) {
			if (ret)
				cli_error(cmd, "%s", err_msg());
			else if (count == 0)
				cli_error(cmd, "no jobs in %s", root);
			else
				cli_error(cmd, "%zu jobs in %s; name one as JOB or JOB/CKPT", count, root);
			store_names_free(names, count);
			return EXIT_FAIL;
		}
		snprintf(job, NAME_MAX + 1, "%s", names[0]);
		store_names_free(names, count);
	}
	if (!job_name_ok(job) || (ckpt[0] && !job_name_ok(ckpt))) {
		cli_error(cmd, "bad checkpoint name '%s'", argv[first]);
		return EXIT_USAGE;
	}
	{
		char index[PATH_MAX];

		snprintf(index, sizeof(index), "%s/%s/index", root, job);
		if (access(index, F_OK) != 0) {
			cli_error(cmd, "no job '%s' in %s", job, root);
			return EXIT_FAIL;
		}
	}
	return EXIT_OK;
}

/* restart --standby: the job's stand-by (`stasis standby`) restores the
 * checkpoint; retried while its ranks are not all past MPI_Init */
static int restart_standby(const struct proc_args *a, const char *root, const char *job,
			   const char *ckpt)
{
	char dir[PATH_MAX], req[200], reply[PATH_MAX + 300], name[64];
	unsigned ranks = 0;
	double secs = 0;
	int ret, tries = 0, waits = (int)(cfg_u64(CFG_STANDBY_WAIT) * 50);

	if (a->launcher || a->lazy || a->interval || a->recover || a->max_restarts || a->spares ||
	    a->level || a->no_signal) {
		cli_error("restart", "--standby: the stand-by's ranks run under the launcher and "
			  "options `stasis standby` started them with (give those there)");
		return EXIT_USAGE;
	}
	snprintf(dir, sizeof(dir), "%s/%s", root, job);
	if (!ckpt[0]) {
		struct store *st = NULL;

		ret = store_open(cfg_str(CFG_TIER), root, job, &st);
		if (!ret)
			ret = store_select(st, name, sizeof(name));
		store_close(&st);
		if (ret) {
			cli_error("restart", "%s", err_msg());
			return EXIT_FAIL;
		}
		ckpt = name;
	}
	snprintf(req, sizeof(req), "RESTORE %s", ckpt);
	/* a stand-by started just before (`stasis standby ... &`) may have
	 * no coordinator yet, or ranks not past MPI_Init: waited for, up to
	 * standby_wait seconds in 20 ms steps */
	while (((ret = coord_request(dir, req, 600000, reply, sizeof(reply))) == -EREMOTEIO ?
		!strncmp(reply, "not ready:", 10) : ret == -ECONNREFUSED || ret == -ENOENT) &&
	       tries++ < waits)
		usleep(20000);
	if (ret == -ECONNREFUSED || ret == -ENOENT) {
		cli_error("restart", "--standby: no stand-by of job %s runs (no coordinator in %s): "
			  "start one with `stasis standby`", job, dir);
		return EXIT_FAIL;
	}
	if (ret) {
		cli_error("restart", "--standby: %s", ret == -EREMOTEIO ? reply : err_msg());
		return EXIT_FAIL;
	}
	if (sscanf(reply, "%63s %u ranks %lf", name, &ranks, &secs) == 3)
		printf("restart: %s restored into the stand-by's %u ranks in %.3f s\n", name, ranks,
		       secs);
	return EXIT_OK;
}

int cmd_restart(int argc, char **argv)
{
	struct coord_opts o;
	struct proc_args a;
	char job[NAME_MAX + 1] = "", ckpt[128] = "";
	const char *root;
	int status = 0, ret;

	if ((ret = parse("restart", argc, argv, &a, "abefjklmnz")) != EXIT_OK)
		return ret;
	/* the key single processes read here and split ranks in their lower
	 * half (docs/transparent.md, "Lazy restore") */
	if (a.lazy && setenv("STASIS_RESTORE_LAZY", "1", 1) != 0) {
		cli_error("restart", "cannot set STASIS_RESTORE_LAZY: %s", strerror(errno));
		return EXIT_FAIL;
	}
	if ((ret = level_interval("restart", &a, &o)) != EXIT_OK)
		return ret;
	root = cli_root(a.dir);
	if ((ret = restart_operand("restart", argc, argv, a.first_operand, root, job, ckpt)) != EXIT_OK)
		return ret;
	if (a.standby)
		return restart_standby(&a, root, job, ckpt);
	if ((ret = job_opts("restart", &a, root, job, &o)) != EXIT_OK)
		return ret;
	ret = restart(&o, ckpt[0] ? ckpt : NULL, &status);
	return exit_with(ret, status, "restart");
}

int cmd_standby(int argc, char **argv)
{
	struct coord_opts o;
	struct proc_args a;
	char job[NAME_MAX + 1] = "", ckpt[128] = "";
	const char *root;
	int status = 0, ret;

	if ((ret = parse("standby", argc, argv, &a, "abefjkz")) != EXIT_OK ||
	    (ret = level_interval("standby", &a, &o)) != EXIT_OK)
		return ret;
	root = cli_root(a.dir);
	if ((ret = restart_operand("standby", argc, argv, a.first_operand, root, job, ckpt)) != EXIT_OK)
		return ret;
	if (ckpt[0]) {
		cli_error("standby", "a stand-by is for a job (JOB), not a checkpoint: `stasis restart "
			  "--standby %s` names the checkpoint", argv[a.first_operand]);
		return EXIT_USAGE;
	}
	if ((ret = job_opts("standby", &a, root, job, &o)) != EXIT_OK)
		return ret;
	o.spares = 0;
	ret = coord_standby(&o, &status);
	return exit_with(ret, status, "standby");
}

static json_t *int_or_null(const char *v)
{
	char *end;
	long long n;

	if (!v)
		return json_null();
	errno = 0;
	n = strtoll(v, &end, 10);
	return errno || end == v || *end ? json_null() : json_integer(n);
}

/* r:p@h,... ("-": none) as an array of {rank, pid, host}; v is cut up */
static json_t *rank_list(char *v)
{
	json_t *a = json_array();
	char *save = NULL, *r;

	for (r = strtok_r(v, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(r, ':'), *at = colon ? strchr(colon, '@') : NULL;
		json_t *e;

		if (!colon || !at)
			continue;
		*colon = *at = 0;
		e = json_object();
		json_object_set_new(e, "rank", int_or_null(r));
		json_object_set_new(e, "pid", int_or_null(colon + 1));
		json_object_set_new(e, "host", json_string(at + 1));
		json_array_append_new(a, e);
	}
	return a;
}

/* host:pid,... ("-": none) as an array of {host, agent_pid}; v is cut up */
static json_t *node_list(char *v)
{
	json_t *a = json_array();
	char *save = NULL, *h;

	for (h = strtok_r(v, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(h, ':');
		json_t *e;

		if (!colon)
			continue;
		*colon = 0;
		e = json_object();
		json_object_set_new(e, "host", json_string(h));
		json_object_set_new(e, "agent_pid", int_or_null(colon + 1));
		json_array_append_new(a, e);
	}
	return a;
}

/* The coordinator's STATUS answer (docs/coordinator.md), a line of
 * key=value words, as the "coordinator" object of `status --json`:
 *   job=J pid=P agent=yes|no checkpoints=N last=L                    (a process)
 *   job=J launcher=P ranks=R/S checkpoints=N last=L [standby=S[:V]]
 *     ranks=r:p@h,... nodes=h:p,... lost=r:p@h,...                    (an MPI job)
 * Every key is present; those of the other kind are null. */
static json_t *status_json(const char *reply)
{
	const char *pid = NULL, *agent = NULL, *launcher = NULL, *taken = NULL, *last = NULL;
	const char *standby = NULL, *ready = NULL;
	char buf[1024], *save = NULL, *w;
	json_t *o = json_object(), *registered = json_null(), *size = json_null(), *ranks = json_null();
	json_t *nodes = json_null(), *lost = json_null();

	snprintf(buf, sizeof(buf), "%s", reply);
	for (w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		char *v = strchr(w, '=');

		if (!v)
			continue;
		*v++ = 0;
		if (strcmp(w, "pid") == 0)
			pid = v;
		else if (strcmp(w, "agent") == 0)
			agent = v;
		else if (strcmp(w, "launcher") == 0)
			launcher = v;
		else if (strcmp(w, "checkpoints") == 0)
			taken = v;
		else if (strcmp(w, "last") == 0)
			last = v;
		else if (strcmp(w, "standby") == 0) {
			/* waiting:<ranks ready>, lost:<host>, restoring, restored */
			char *colon = strchr(v, ':');

			if (colon)
				*colon++ = 0;
			standby = v;
			ready = colon && !strcmp(v, "waiting") ? colon : NULL;
		} else if (strcmp(w, "ranks") == 0 && strchr(v, '/')) {
			/* registered/size */
			char *slash = strchr(v, '/');

			*slash = 0;
			json_decref(registered);
			json_decref(size);
			registered = int_or_null(v);
			size = int_or_null(slash + 1);
		} else if (strcmp(w, "ranks") == 0) {
			json_decref(ranks);
			ranks = rank_list(v);
		} else if (strcmp(w, "nodes") == 0) {
			json_decref(nodes);
			nodes = node_list(v);
		} else if (strcmp(w, "lost") == 0) {
			json_decref(lost);
			lost = rank_list(v);
		}
	}
	if (!launcher) {   /* a process: no ranks */
		json_decref(registered);
		json_decref(size);
		json_decref(ranks);
		json_decref(nodes);
		json_decref(lost);
		registered = json_null();
		size = json_null();
		ranks = json_null();
		nodes = json_null();
		lost = json_null();
	}
	json_object_set_new(o, "kind", json_string(launcher ? "mpi" : "process"));
	json_object_set_new(o, "pid", int_or_null(launcher ? NULL : pid));
	json_object_set_new(o, "agent", launcher || !agent ? json_null()
				  : json_boolean(strcmp(agent, "yes") == 0));
	json_object_set_new(o, "launcher_pid", int_or_null(launcher));
	json_object_set_new(o, "ranks_registered", registered);
	json_object_set_new(o, "ranks_size", size);
	json_object_set_new(o, "ranks", ranks);
	json_object_set_new(o, "nodes", nodes);
	json_object_set_new(o, "lost", lost);
	json_object_set_new(o, "checkpoints", int_or_null(taken));
	json_object_set_new(o, "last", last && strcmp(last, "-") != 0 ? json_string(last) : json_null());
	json_object_set_new(o, "standby", standby ? json_string(standby) : json_null());
	json_object_set_new(o, "standby_ready", int_or_null(ready));
	return o;
}

int cmd_status(int argc, char **argv)
{
	struct proc_args a;
	char **names = NULL, reply[1024], dir[PATH_MAX], latest[64], level[16];
	const char *root;
	size_t count = 0;
	json_t *doc = NULL, *jobs = NULL;
	int ret;

	if ((ret = parse("status", argc, argv, &a, "ai")) != EXIT_OK)
		return ret;
	if (a.first_operand < argc) {
		cli_error("status", "unexpected operand '%s' (usage: stasis status [--dir D] [--json])",
			  argv[a.first_operand]);
		return EXIT_USAGE;
	}
	root = cli_root(a.dir);
	if (access(root, F_OK) != 0) {
		cli_error("status", "no checkpoint directory %s", root);
		return EXIT_FAIL;
	}
	if (store_jobs(cfg_str(CFG_TIER), root, &names, &count) != 0) {
		cli_error("status", "%s", err_msg());
		return EXIT_FAIL;
	}
	if (a.json) {
		doc = json_object();
		jobs = json_array();
		json_object_set_new(doc, "root", json_string(root));
		json_object_set_new(doc, "jobs", jobs);
	}
	for (size_t i = 0; i < count; i++) {
		struct store *s = NULL;
		struct store_ckpt_info *list = NULL;
		size_t n = 0, complete = 0;
		const char *state;
		int running = 0;

		snprintf(dir, sizeof(dir), "%s/%s", root, names[i]);
		latest[0] = level[0] = 0;
		if (store_open(cfg_str(CFG_TIER), root, names[i], &s) == 0) {
			if (store_list(s, &list, &n, NULL) == 0)
				for (size_t k = 0; k < n; k++)
					if (list[k].state == STORE_COMPLETE) {
						complete++;
						if (!list[k].current)
							continue;
						snprintf(latest, sizeof(latest), "%s", list[k].name);
						/* its redundancy: local, partner+global... */
						snprintf(level, sizeof(level), "%s", list[k].level);
					}
			free(list);
			store_close(&s);
		}
		if (coord_request(dir, "STATUS", 5000, reply, sizeof(reply)) == 0)
			running = 1, state = "running";
		else if (coord_alive(dir))
			/* it answers between checkpoints and restores: one is under way */
			state = "busy";
		else
			state = "stopped";
		if (jobs) {
			json_t *o = json_object();

			json_object_set_new(o, "name", json_string(names[i]));
			json_object_set_new(o, "state", json_string(state));
			json_object_set_new(o, "established", json_integer((json_int_t)complete));
			json_object_set_new(o, "latest", latest[0] ? json_string(latest) : json_null());
			json_object_set_new(o, "latest_level", level[0] ? json_string(level) : json_null());
			json_object_set_new(o, "coordinator", running ? status_json(reply) : json_null());
			json_array_append_new(jobs, o);
		} else if (running) {
			printf("%s  running  %s  established=%zu latest=%s%s%s\n", names[i], reply,
			       complete, latest[0] ? latest : "-", level[0] ? " level=" : "", level);
		} else {
			printf("%s  %s  established=%zu latest=%s%s%s\n", names[i], state, complete,
			       latest[0] ? latest : "-", level[0] ? " level=" : "", level);
		}
	}
	if (doc) {
		char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(doc);
	}
	store_names_free(names, count);
	return EXIT_OK;
}
