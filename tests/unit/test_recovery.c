/* test_recovery.c - the recovery policies' decisions (coord/policy.h) and
 * the relaunch's launcher command without lost nodes (job_launch_without). */
#include "check.h"
#include "common/config.h"
#include "common/err.h"
#include "coord/job.h"
#include "coord/migrate.h"
#include "coord/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static struct coord_event ev(enum coord_event_kind kind, int status)
{
	struct coord_event e = { .kind = kind, .rank = 1, .status = status };

	strcpy(e.detail, "rank 1 (pid 7 on n2) died");
	return e;
}

static void test_none(void)
{
	struct policy_chain *p = NULL;
	struct coord_event lost = ev(EV_RANK_LOST, 0), end = ev(EV_LAUNCHER_ENDED, 9);
	char msg[256];

	CHECK_EQ(policy_chain_create("none", 3, &p), 0);
	CHECK(!policy_recovers(p));
	CHECK_EQ(policy_decide(p, &lost, msg, sizeof(msg)), POLICY_IGNORE);
	CHECK_EQ(policy_decide(p, &end, msg, sizeof(msg)), POLICY_END);
	policy_chain_free(&p);
	CHECK(p == NULL);
	CHECK_EQ(policy_chain_create("sometimes", 3, &p), -22);
}

static void test_auto(void)
{
	struct policy_chain *p = NULL;
	struct coord_event lost = ev(EV_RANK_LOST, 0), bad = ev(EV_LAUNCHER_ENDED, 137),
			   good = ev(EV_LAUNCHER_ENDED, 0), ckpt = ev(EV_CKPT_ESTABLISHED, 0);
	char msg[256];

	CHECK_EQ(policy_chain_create("auto", 2, &p), 0);
	CHECK(policy_recovers(p));
	/* the program's own failure, nothing lost: the job ends */
	CHECK_EQ(policy_decide(p, &bad, msg, sizeof(msg)), POLICY_END);
	CHECK_EQ(policy_decide(p, &ckpt, msg, sizeof(msg)), POLICY_IGNORE);
	CHECK_EQ(policy_decide(p, &lost, msg, sizeof(msg)), POLICY_RECOVER);
	/* the launcher's end after a loss is the same failure */
	CHECK_EQ(policy_decide(p, &bad, msg, sizeof(msg)), POLICY_RECOVER);
	CHECK_EQ(policy_backoff_ms(p), 0);
	policy_recovered(p);
	policy_launched(p);
	CHECK_EQ(policy_restarts(p), 1);
	CHECK_EQ(policy_backoff_ms(p), 1000);
	/* the relaunch ends badly before every rank is back: a failure */
	CHECK_EQ(policy_decide(p, &bad, msg, sizeof(msg)), POLICY_RECOVER);
	policy_recovered(p);
	policy_launched(p);
	policy_running(p);
	CHECK_EQ(policy_backoff_ms(p), 2000);
	CHECK_EQ(policy_decide(p, &good, msg, sizeof(msg)), POLICY_END);
	CHECK_EQ(policy_decide(p, &lost, msg, sizeof(msg)), POLICY_GIVE_UP);
	CHECK(!strcmp(msg, "rank 1 (pid 7 on n2) died; not recovered: --max-restarts 2 reached"));
	for (int i = 0; i < 10; i++)
		policy_recovered(p);
	CHECK_EQ(policy_backoff_ms(p), 30000);
	policy_chain_free(&p);
}

static char lost[2][64] = { "n2", "n3" };
static char used[3][64] = { "n1", "n2", "n3" };

/* argv of job_launch_without, joined by spaces */
static void relaunch(char *const *argv, unsigned nlost, char *out, size_t len, char *note)
{
	char **v = NULL;
	size_t n = 0;

	out[0] = 0;
	CHECK_EQ(job_launch_without(argv, lost, nlost, used, 3, &v, note, 200), 0);
	for (int i = 0; v && v[i]; i++)
		n += (size_t)snprintf(out + n, len - n, "%s%s", i ? " " : "", v[i]);
	free(v);
}

/* job_launch_spares's argv joined by spaces, "" when refused */
static void with_spares(char *const *argv, unsigned spares, char *out, size_t len)
{
	char **v = NULL;
	size_t n = 0;

	out[0] = 0;
	if (job_launch_spares(argv, spares, &v) != 0)
		return;
	for (int i = 0; v[i]; i++)
		n += (size_t)snprintf(out + n, len - n, "%s%s", i ? " " : "", v[i]);
	free(v);
}

/* the rank count before the program raised, the program's own -n kept */
static void test_spares(void)
{
	char out[512];
	char *ompi[] = { "mpirun", "--oversubscribe", "-np", "2", "/bin/true", "-n", "5", NULL };
	char *hydra[] = { "mpiexec.mpich", "-hosts=n1,n2", "-n", "9", "/bin/true", NULL };
	char *srun[] = { "srun", "--mpi=pmix", "--ntasks=4", "/bin/true", NULL };
	char *none[] = { "mpiexec.mpich", "/bin/true", "-n", "2", NULL };
	char *bad[] = { "mpirun", "-np", "x", "/bin/true", NULL };

	with_spares(ompi, 1, out, sizeof(out));
	CHECK(!strcmp(out, "mpirun --oversubscribe -np 3 /bin/true -n 5"));
	with_spares(hydra, 2, out, sizeof(out));
	CHECK(!strcmp(out, "mpiexec.mpich -hosts=n1,n2 -n 11 /bin/true"));
	with_spares(srun, 1, out, sizeof(out));
	CHECK(!strcmp(out, "srun --mpi=pmix --ntasks=5 /bin/true"));
	with_spares(none, 1, out, sizeof(out));
	CHECK(!out[0] && strstr(err_msg(), "gives no number of ranks"));
	with_spares(bad, 1, out, sizeof(out));
	CHECK(!out[0]);
	err_clear();
}

static void test_hosts(void)
{
	char out[512], note[200];
	char *ompi[] = { "mpirun", "--host", "n1:1,n2:1,n3:1,n4:1", "-np", "3", "/bin/true", "x",
			 NULL };
	char *hydra[] = { "mpiexec.mpich", "-hosts=n1,n2,n4", "-n", "2", "/bin/true", NULL };
	char *srun[] = { "srun", "--mpi=pmix", "-n", "4", "/bin/true", NULL };
	char *plain[] = { "mpirun", "-np", "2", "/bin/true", "--host", NULL };

	relaunch(ompi, 1, out, sizeof(out), note);
	CHECK(!strcmp(out, "mpirun --host n1:1,n4:1,n3:1 -np 3 /bin/true x"));
	CHECK(!strcmp(note, "n2 replaced by n4"));
	/* two lost, one spare: the second is dropped */
	relaunch(ompi, 2, out, sizeof(out), note);
	CHECK(!strcmp(out, "mpirun --host n1:1,n4:1 -np 3 /bin/true x"));
	CHECK(!strcmp(note, "n2 replaced by n4, n3 dropped (no spare left)"));
	relaunch(hydra, 1, out, sizeof(out), note);
	CHECK(!strcmp(out, "mpiexec.mpich -hosts=n1,n4 -n 2 /bin/true"));
	relaunch(srun, 2, out, sizeof(out), note);
	CHECK(!strcmp(out, "srun --exclude=n2,n3 --overlap --mpi=pmix -n 4 /bin/true"));
	CHECK(!strcmp(note, "srun --exclude=n2,n3"));
	/* the program's own operands are never edited */
	relaunch(plain, 1, out, sizeof(out), note);
	CHECK(!strcmp(out, "mpirun -np 2 /bin/true --host"));
	CHECK(!strcmp(note, "n2 lost, but the launcher's command names no host list to take it "
		      "out of"));
	relaunch(ompi, 0, out, sizeof(out), note);
	CHECK(!strcmp(out, "mpirun --host n1:1,n2:1,n3:1,n4:1 -np 3 /bin/true x") && !note[0]);
}

/* crmig, first of both chains: a migration asked for is made; a predicted
 * fault migrates when the expected time fits the bound, else checkpoints */
static void test_crmig(void)
{
	static const char *const chains[] = { "none", "auto" };

	for (unsigned i = 0; i < 2; i++) {
		struct policy_chain *p = NULL;
		struct coord_event ask = ev(EV_MIGRATE_ASKED, 0), soon = ev(EV_FAULT_PREDICTED, 0);
		char msg[256];

		strcpy(soon.node, "n2");
		CHECK_EQ(policy_chain_create(chains[i], 3, &p), 0);
		CHECK_EQ(policy_decide(p, &ask, msg, sizeof(msg)), POLICY_MIGRATE);
		soon.bound_ms = 60000;
		soon.expect_ms = 2500;
		CHECK_EQ(policy_decide(p, &soon, msg, sizeof(msg)), POLICY_MIGRATE);
		soon.bound_ms = 1000;
		CHECK_EQ(policy_decide(p, &soon, msg, sizeof(msg)), POLICY_CHECKPOINT);
		CHECK(!strcmp(msg, "migrating n2's ranks would take about 2.5 s, more than the 1.0 s "
			      "predicted: checkpoint now"));
		CHECK_EQ(policy_restarts(p), 0);
		policy_chain_free(&p);
	}
}

/* a rank the program ended itself (exit without MPI_Finalize, MPI_Abort)
 * is not recovered, nor are the losses that follow it in that launch */
static void test_quit(void)
{
	struct policy_chain *p = NULL;
	struct coord_event quit = ev(EV_RANK_QUIT, 3), died = ev(EV_RANK_LOST, 0),
			   bad = ev(EV_LAUNCHER_ENDED, 3);
	char msg[512];

	strcpy(quit.detail, "rank 1 (pid 7 on n2) exited with status 3 without calling MPI_Finalize");
	CHECK_EQ(policy_chain_create("none", 3, &p), 0);
	CHECK_EQ(policy_decide(p, &quit, msg, sizeof(msg)), POLICY_IGNORE);
	CHECK(msg[0] == 0);
	policy_chain_free(&p);

	CHECK_EQ(policy_chain_create("auto", 3, &p), 0);
	CHECK_EQ(policy_decide(p, &quit, msg, sizeof(msg)), POLICY_IGNORE);
	CHECK(!strcmp(msg, "rank 1 (pid 7 on n2) exited with status 3 without calling MPI_Finalize: "
		      "the program's own end, not recovered"));
	CHECK_EQ(policy_decide(p, &died, msg, sizeof(msg)), POLICY_IGNORE);
	CHECK_EQ(policy_decide(p, &bad, msg, sizeof(msg)), POLICY_END);
	/* a new launch: a loss is recovered again */
	policy_launched(p);
	CHECK_EQ(policy_decide(p, &died, msg, sizeof(msg)), POLICY_RECOVER);
	policy_chain_free(&p);
}

/* migrate_move_dir through a stand-in remote shell that runs the command
 * here; with "fail" in its name the source's tar ends with status 2 after
 * writing its whole archive (as tar does on a file it could not read): the
 * source's copy must stay. Paths the remote shell would expand are
 * refused. */
static void test_move_dir(void)
{
	char base[] = "/tmp/sts-move-XXXXXX", sh_ok[128], sh_fail[128], path[256];
	FILE *f;

	CHECK(mkdtemp(base) != NULL);
	snprintf(sh_ok, sizeof(sh_ok), "%s/rsh", base);
	snprintf(sh_fail, sizeof(sh_fail), "%s/rsh-fail", base);
	f = fopen(sh_ok, "w");
	CHECK(f != NULL);
	fputs("#!/bin/sh\nshift\nexec sh -c \"$*\"\n", f);
	fclose(f);
	f = fopen(sh_fail, "w");
	CHECK(f != NULL);
	fputs("#!/bin/sh\nshift\ncase \"$*\" in *'-cf -'*) sh -c \"$*\"; exit 2;; esac\n"
	      "exec sh -c \"$*\"\n", f);
	fclose(f);
	CHECK_EQ(chmod(sh_ok, 0755), 0);
	CHECK_EQ(chmod(sh_fail, 0755), 0);
	snprintf(path, sizeof(path), "%s/src", base);
	CHECK_EQ(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/src/cache", base);
	CHECK_EQ(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/src/cache/image", base);
	f = fopen(path, "w");
	CHECK(f != NULL);
	fputs("bytes", f);
	fclose(f);

	char from[160], to[160];

	snprintf(from, sizeof(from), "%s/src", base);
	snprintf(to, sizeof(to), "%s/dst", base);
	CHECK_EQ(cfg_set("migrate_shell", sh_fail), 0);
	CHECK_EQ(migrate_move_dir("n2", from, "n4", to, "cache", 10000), -5);
	CHECK(strstr(err_msg(), "failed") != NULL);
	CHECK_EQ(access(path, F_OK), 0);   /* the source's copy is still there */

	CHECK_EQ(cfg_set("migrate_shell", sh_ok), 0);
	CHECK_EQ(migrate_move_dir("n2", from, "n4", to, "cache", 10000), 0);
	CHECK(access(path, F_OK) != 0);
	snprintf(path, sizeof(path), "%s/dst/cache/image", base);
	CHECK_EQ(access(path, F_OK), 0);

	CHECK_EQ(migrate_move_dir("n2", "/tmp/$HOME", "n4", to, "cache", 10000), -22);
	CHECK(strstr(err_msg(), "cannot quote '/tmp/$HOME'") != NULL);
	CHECK_EQ(migrate_move_dir("n2", from, "n4", to, "ca`x`", 10000), -22);
	snprintf(path, sizeof(path), "rm -rf '%s'", base);
	CHECK_EQ(system(path), 0);
}

/* migrate_hosts_alive when the fork fails (no process left to the user:
 * RLIMIT_NPROC 0, as another user when run as root, whom it binds not):
 * the host is unknown, a negative errno, not 0 (lost). */
static void test_alive_no_fork(void)
{
	char hosts[1][64] = { "n2" };
	int fds[2], alive = 7, st = 0;
	pid_t pid;

	CHECK_EQ(cfg_set("migrate_shell", "true"), 0);
	CHECK_EQ(pipe(fds), 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct rlimit none = { 0, 0 };

		if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
			_exit(2);
		if (setrlimit(RLIMIT_NPROC, &none) != 0)
			_exit(3);
		migrate_hosts_alive(hosts, 1, &alive, 1000);
		_exit(write(fds[1], &alive, sizeof(alive)) == sizeof(alive) ? 0 : 4);
	}
	close(fds[1]);
	CHECK_EQ(read(fds[0], &alive, sizeof(alive)), sizeof(alive));
	close(fds[0]);
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK_EQ(st, 0);
	CHECK_EQ(alive, -EAGAIN);
	/* and a host that answers is 1 */
	migrate_hosts_alive(hosts, 1, &alive, 10000);
	CHECK_EQ(alive, 1);
}

/* child's start time, as /proc/<pid>/stat says it */
static unsigned long long started(pid_t pid)
{
	char path[64], buf[1024] = "";
	unsigned long long t = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f && fgets(buf, sizeof(buf), f) && strrchr(buf, ')'))
		sscanf(strrchr(buf, ')') + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u "
		       "%*u %*d %*d %*d %*d %*d %*d %llu", &t);
	if (f)
		fclose(f);
	return t;
}

/* a receiver that stopped answering is killed on its node by its pid and
 * start time: a process that took the pid since (another start time)
 * lives on */
static void test_kill_cmd(void)
{
	pid_t child = fork();
	char cmd[160];
	int st = 0;

	if (child == 0) {
		pause();
		_exit(0);
	}
	CHECK(child > 0);
	CHECK(started(child) > 0);
	CHECK_EQ(migrate_kill_cmd(cmd, sizeof(cmd), child, started(child) + 1), 0);
	CHECK(system(cmd) != -1);
	CHECK_EQ(waitpid(child, &st, WNOHANG), 0);   /* not the one that started then */
	CHECK_EQ(migrate_kill_cmd(cmd, sizeof(cmd), child, started(child)), 0);
	CHECK(system(cmd) != -1);
	CHECK_EQ(waitpid(child, &st, 0), child);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK_EQ(migrate_kill_cmd(cmd, 8, child, 1), -ENAMETOOLONG);
}

int main(void)
{
	test_kill_cmd();
	test_alive_no_fork();
	test_move_dir();
	test_none();
	test_quit();
	test_crmig();
	test_auto();
	test_hosts();
	test_spares();
	return check_result("recovery");
}
