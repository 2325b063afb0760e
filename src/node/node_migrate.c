/* node_migrate.c - a migration's transfer (node_migrate.h,
 * docs/coordinator.md, "Migration"): the source node's agent sends the
 * migrating ranks' staged images straight to a receiver on the target
 * node, which writes them into that node's local directory (a tmpfs: its
 * memory) at the path the restart reads, each one checked (every chunk's
 * CRC) before it is renamed into place. Nothing goes through the global
 * tier. Once every image is in place the source removes the job's
 * node-local directory: nothing of the job stays on the source node.
 *
 * The stream, over one TCP connection from the source to the receiver:
 *   source:   MIGRATE <secret>
 *             IMAGE <size> <path>        then <size> bytes
 *   receiver: OK | ERR <why>             (after each image)
 *   source:   END
 * A move into spares has each moving rank stream its image while it
 * writes it, one connection a rank, nothing written on the source:
 *   rank:     MIGRATE <secret>
 *             IMAGE - <path>             then the bytes, to the end of its
 *                                        side of the connection (shutdown)
 *   receiver: OK | ERR <why>
 * and the receiver takes as many sources as it was told.
 */
#include "node/node_migrate.h"

#include "common/config.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/line.h"
#include "image/image.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PIECE (4u << 20)
#define ACCEPT_TIMEOUT_MS 300000   /* started while the ranks checkpoint */
#define LINE_TIMEOUT_MS 60000
/* the receiver's answer once the image is sent: it still writes what the
 * socket buffers hold and checks it (tmpfs: GiB/s; 64 MiB/s is a loaded
 * machine's worst) */
#define ANSWER_BASE_MS 5000
#define ANSWER_MIB_PER_S 64
#define PROGRESS_TIMEOUT_MS 30000   /* a stream's peer that takes or gives nothing */

/* In the receiver: its stdout, the pipe to the remote shell that started
 * it; once that closes (the coordinator cancelled or ended it) the
 * receiver ends rather than stay, orphaned, on the target. -1 elsewhere. */
static int watched_out = -1;

/* Wait until fd can be read, at most timeout_ms; -ECANCELED once the
 * receiver's stdout closed */
static int wait_in(int fd, int timeout_ms)
{
	struct pollfd p[2] = { { fd, POLLIN, 0 }, { watched_out, 0, 0 } };
	int n;

	while ((n = poll(p, watched_out >= 0 ? 2 : 1, timeout_ms)) < 0 && errno == EINTR)
		;
	if (n > 0 && p[1].revents)
		return -ECANCELED;
	return n > 0 ? 0 : n == 0 ? -ETIMEDOUT : -errno;
}

/* A stream's socket: a write or read that makes no progress for
 * PROGRESS_TIMEOUT_MS fails (EAGAIN) instead of blocking for good */
static void progress_timeout(int fd)
{
	struct timeval tv = { PROGRESS_TIMEOUT_MS / 1000, 0 };

	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t w = write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -errno ? -errno : -EIO;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		int w = wait_in(fd, PROGRESS_TIMEOUT_MS);
		ssize_t r;

		if (w)
			return w;
		r = read(fd, p, len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r == 0 ? -EPIPE : -errno;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

/* One line (without its newline), at most timeout_ms */
static int get_line(int fd, char *buf, size_t len, int timeout_ms)
{
	size_t n = 0;

	while (n + 1 < len) {
		int ret = wait_in(fd, timeout_ms);

		if (ret)
			return ret;
		if (read(fd, buf + n, 1) != 1)
			return -EPIPE;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = 0;
	return 0;
}

#define ALIVE_MS 200

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int node_migrate_answer_ms(uint64_t bytes)
{
	uint64_t ms = ANSWER_BASE_MS + (bytes >> 20) * 1000 / ANSWER_MIB_PER_S;

	return ms < INT32_MAX ? (int)ms : INT32_MAX;
}

/* The image at path, open and read locked (store_io_open's shared flock,
 * which store_file_retire honours: a file a reader holds is removed, never
 * written over as a spare), still the file of that name once locked.
 * Nothing retires it today: a node's images are retired only by its
 * agent's one thread (node_level_verdict at RESUME, which trims the
 * checkpoints beyond cache_keep older than the one established), the
 * thread that sends; and the move's cut, the newest, is kept by a trim.
 * The lock keeps it so should that change. */
static int image_open(const char *path, struct stat *st)
{
	struct stat now;
	int in = open(path, O_RDONLY | O_CLOEXEC);

	while (in >= 0 && flock(in, LOCK_SH) != 0 && errno == EINTR)
		;
	if (in < 0 || fstat(in, st) != 0 || stat(path, &now) != 0) {
		int ret = err_set(-errno, "cannot read %s: %s", path, strerror(errno));

		if (in >= 0)
			close(in);
		return ret;
	}
	if (now.st_ino != st->st_ino || now.st_dev != st->st_dev) {
		close(in);
		return err_set(-ESTALE, "cannot read %s: it was replaced as it was opened", path);
	}
	return in;
}

static int send_image(int fd, const char *path, char *buf, void (*alive)(void), uint64_t *bytes)
{
	uint64_t said = mono_ms();
	struct stat st;
	char line[PATH_MAX + 64];
	int in = image_open(path, &st), ret = 0, n;

	if (in < 0)
		return in;
	n = snprintf(line, sizeof(line), "IMAGE %lld %s\n", (long long)st.st_size, path);
	ret = write_all(fd, line, (size_t)n);
	for (off_t left = st.st_size; !ret && left > 0;) {
		ssize_t r = read(in, buf, left < PIECE ? (size_t)left : PIECE);

		if (r <= 0) {
			ret = err_set(-EIO, "cannot read %s: %s", path, r ? strerror(errno) : "it shrank");
			break;
		}
		if (alive && mono_ms() - said >= ALIVE_MS) {
			alive();
			said = mono_ms();
		}
		if ((ret = FAULT(NODE_MIGRATE)) != 0) {
			ret = err_set(ret, "fault point node.migrate");
			break;
		}
		if ((ret = write_all(fd, buf, (size_t)r)) != 0)
			ret = err_set(ret, "the receiver closed the connection");
		left -= r;
		*bytes += (uint64_t)r;
	}
	close(in);
	if (!ret && (ret = get_line(fd, line, sizeof(line),
				    node_migrate_answer_ms((uint64_t)st.st_size))) != 0)
		ret = err_set(ret, "the receiver did not confirm %s within %d s", path,
			      node_migrate_answer_ms((uint64_t)st.st_size) / 1000);
	if (!ret && strcmp(line, "OK"))
		ret = err_set(-EIO, "the receiver refused %s: %s", path,
			      strncmp(line, "ERR ", 4) ? line : line + 4);
	return ret;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

int node_migrate_send(const char *args, const char *stage_dir, const char *local_job,
		      const char *secret, void (*alive)(void), uint64_t *bytes, char *removed,
		      size_t rlen)
{
	char addr[300], ckpt[64], path[PATH_MAX], *buf = NULL;
	int fd = -1, pos = 0, rank, ret, any;

	*bytes = 0;
	if (!stage_dir)
		return err_set(-EINVAL, "the node has no staged images (staging is off)");
	if (sscanf(args, "%299s %63s %n", addr, ckpt, &pos) != 2 || !pos)
		return err_set(-EINVAL, "bad MIGRATE line '%.80s'", args);
	/* no rank: their images were streamed (a move into spares); the
	 * directory only goes */
	any = sscanf(args + pos, "%d", &rank) == 1;
	ret = any ? line_connect(addr, "the migration's receiver", &fd) : 0;
	if (!ret && any)
		progress_timeout(fd);
	if (!ret && any && !(buf = malloc(PIECE)))
		ret = err_set(-ENOMEM, "out of memory");
	if (!ret && any) {
		char line[128];
		int n = snprintf(line, sizeof(line), "MIGRATE %s\n", secret);

		ret = write_all(fd, line, (size_t)n);
	}
	for (const char *p = args + pos; !ret && sscanf(p, "%d %n", &rank, &pos) == 1; p += pos) {
		snprintf(path, sizeof(path), "%s/%s/%s/rank-%05d.img", stage_dir, local_job, ckpt, rank);
		ret = send_image(fd, path, buf, alive, bytes);
	}
	if (!ret && any)
		ret = write_all(fd, "END\n", 4);
	if (fd >= 0)
		close(fd);
	free(buf);
	if (ret)
		return ret;
	/* every image is on the target: the job leaves this node */
	snprintf(removed, rlen, "%s/%s", stage_dir, local_job);
	if (nftw(removed, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
		return err_set(-errno, "the images were sent, but %s cannot be removed: %s", removed,
			       strerror(errno));
	return 0;
}

/* ---- the receiver: stasis-node --receive <job dir> ---- */

static int mkdirs(char *path)
{
	for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = 0;
		if (mkdir(path, 0700) != 0 && errno != EEXIST) {
			*s = '/';
			return -errno;
		}
		*s = '/';
	}
	return 0;
}

/* The file an image is written into: an unnamed one of its directory
 * (O_TMPFILE: a receiver killed at any point leaves nothing behind), or,
 * where the file system refuses those (NFS, overlayfs before 6.6: the
 * local directory is the user's choice), tmp itself, which a failure
 * removes and a receiver killed leaves (the next receive of that image
 * replaces it); *named says which */
static int image_file(const char *dir, const char *tmp, int *named)
{
	int fd = FAULT(NODE_TMPFILE) ? (errno = EOPNOTSUPP, -1) :
		 open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	*named = fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL);
	if (!*named)
		return fd;
	if (unlink(tmp) != 0 && errno != ENOENT)
		return -1;
	return open(tmp, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
}

/* The next piece of an image from the source into buf (at most n bytes):
 * the bytes read, 0 at a streamed image's end (the source shut its side),
 * or a negative errno with a message */
static ssize_t read_piece(int fd, const char *path, int streamed, char *buf, size_t n)
{
	ssize_t got;
	int ret;

	if (!streamed) {
		ret = read_all(fd, buf, n);
		return ret ? err_set(ret, "the source closed the connection inside %s", path) :
		       (ssize_t)n;
	}
	if ((ret = wait_in(fd, PROGRESS_TIMEOUT_MS)) != 0)
		return err_set(ret, "reading %s: %s", path, ret == -ECANCELED ?
			       "the receiver was cancelled" : "nothing came for 30 s");
	while ((got = read(fd, buf, n)) < 0 && errno == EINTR)
		;
	return got < 0 ? err_set(-errno, "reading %s: %s", path, strerror(errno)) : got;
}

/* The image of the stream, written into its file (image_file) and checked
 * as it passes (img_scan: the header's, every chunk's and the manifest's
 * checksums, on the bytes received, not read back: a second pass over the
 * image was a fifth of a move's time), its header and manifest opened
 * once whole and their chunks matched with those checked (their headers
 * read, not their payloads), then (unnamed) linked as <path>.tmp, and
 * renamed into place.
 * A bad image is read to its end before it is refused: the source hears
 * why, not a connection closed under it. */
static int receive_image(int fd, const char *path, long long size, char *buf)
{
	char tmp[PATH_MAX + 8], dir[PATH_MAX], self[64], why[512] = "";
	const char *base = strrchr(path, '/');
	struct img_reader *r = NULL;
	struct img_scan *scan = NULL;
	int out, ret = 0, bad = 0, rank, named;
	char end;

	if (path[0] != '/' || strstr(path, "/../") || !base || size < -1 ||
	    sscanf(base, "/rank-%5d.im%c", &rank, &end) != 2 || end != 'g')
		return err_set(-EINVAL, "not a rank's image path: %.200s", path);
	snprintf(dir, sizeof(dir), "%.*s", (int)(base - path), path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (mkdirs(tmp) != 0 || (out = image_file(dir, tmp, &named)) < 0)
		return err_set(-errno, "cannot write an image in %s: %s", dir, strerror(errno));
	snprintf(self, sizeof(self), "/proc/self/fd/%d", out);
	ret = img_scan_create(path, &scan);
	for (long long left = size; !ret && left;) {
		ssize_t got = read_piece(fd, path, size < 0, buf, left > 0 && left < PIECE ?
					 (size_t)left : PIECE);

		if (got <= 0) {
			ret = (int)got;
			break;
		}
		if (size > 0)
			left -= got;
		if (bad)
			continue;   /* to its end: the source then reads why */
		if ((bad = img_scan_feed(scan, buf, (size_t)got)) != 0) {
			snprintf(why, sizeof(why), "%s", err_msg());
			continue;
		}
		if ((ret = write_all(out, buf, (size_t)got)) != 0)
			ret = err_set(ret, "cannot write %s: %s", tmp, strerror(-ret));
	}
	if (!ret && bad)
		ret = err_set(bad, "%s", why);
	if (!ret && (ret = FAULT(NODE_RECEIVE)) != 0)
		ret = err_set(ret, "fault point node.receive");
	ret = ret ? ret : img_scan_end(scan);
	/* the header's id against the manifest's, the manifest's sections,
	 * and the chunks they name against those checked as they came (a
	 * restore walks them so: an image it would refuse is refused here) */
	ret = ret ? ret : img_open_fd(out, path, &r);
	ret = ret ? ret : img_scan_match(scan, r);
	img_close(&r);
	img_scan_free(&scan);
	if (!ret && !named && (unlink(tmp) != 0 && errno != ENOENT))
		ret = err_set(-errno, "cannot remove %s: %s", tmp, strerror(errno));
	if (!ret && !named && linkat(AT_FDCWD, self, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) != 0)
		ret = err_set(-errno, "cannot link %s: %s", tmp, strerror(errno));
	if (!ret && rename(tmp, path) != 0)
		ret = err_set(-errno, "cannot rename %s: %s", tmp, strerror(errno));
	if (ret)   /* no partial or refused image stays under a name */
		unlink(tmp);
	close(out);
	return ret;
}

static int listen_any(int *port, int backlog)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE }, *res;
	int fd, one = 1;

	if (getaddrinfo(NULL, "0", &hints, &res) != 0)
		return -EADDRNOTAVAIL;
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, backlog) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
		freeaddrinfo(res);
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	freeaddrinfo(res);
	*port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port :
			((struct sockaddr_in *)&sa)->sin_port);
	return fd;
}

/* One source's connection: its images, each answered; a streamed image
 * (IMAGE -) is the connection's last */
static int serve_source(int fd, const char *secret, char *buf)
{
	char line[PATH_MAX + 64], path[PATH_MAX];
	long long size;
	int ret, pos = 0;

	if (get_line(fd, line, sizeof(line), LINE_TIMEOUT_MS) != 0 ||
	    strncmp(line, "MIGRATE ", 8) || strcmp(line + 8, secret))
		return err_set(-EACCES, "the source did not present the job's secret");
	while ((ret = get_line(fd, line, sizeof(line), LINE_TIMEOUT_MS)) == 0 && strcmp(line, "END")) {
		int streamed = !strncmp(line, "IMAGE - ", 8);

		size = -1;
		if (streamed)
			pos = 8;
		else if (sscanf(line, "IMAGE %lld %n", &size, &pos) != 1 || !pos || size < 0)
			return err_set(-EPROTO, "unexpected line '%.80s'", line);
		snprintf(path, sizeof(path), "%s", line + pos);
		ret = receive_image(fd, path, size, buf);
		if (ret) {
			dprintf(fd, "ERR %s\n", err_msg());
			return ret;
		}
		dprintf(fd, "OK\n");
		if (streamed)
			return 0;
	}
	return ret;
}

/* One source of the receiver's, served in its own thread */
struct source {
	pthread_t t;
	int started;
	int fd;
	const char *secret;
	int ret;
	char why[400];
};

static void *serve_thread(void *arg)
{
	struct source *s = arg;
	char *buf = malloc(PIECE);

	s->ret = buf ? serve_source(s->fd, s->secret, buf) : err_set(-ENOMEM, "out of memory");
	if (s->ret)
		snprintf(s->why, sizeof(s->why), "%s", err_msg());
	close(s->fd);
	free(buf);
	return NULL;
}

/* This process's start time (clock ticks after boot, the 22nd field of
 * /proc/self/stat): with the pid, what names it for good on its node (a
 * pid alone may be another process's once it ended); 0 if unknown */
static unsigned long long start_time(void)
{
	char buf[1024], *p;
	unsigned long long t = 0;
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');   /* the name before it may hold spaces */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
			 "%*d %*d %*d %*d %llu", &t) != 1)
		return 0;
	return t;
}

int node_migrate_receive(const char *job_dir, int sources)
{
	char secret[33] = "", spath[PATH_MAX], why[500] = "";
	struct source *src;
	int lfd, fd, sfd, port = 0, nsrc = 0;

	/* a session of its own, as under a real ssh: the signals of the
	 * coordinator's process group (an orphaned group's SIGHUP and SIGCONT
	 * when a member ends) are not the receiver's */
	setsid();
	if (cfg_load(NULL) != 0)   /* the fault points a test armed (migrate.c) */
		fprintf(stderr, "stasis-node: %s; the defaults are used\n", err_msg());
	snprintf(spath, sizeof(spath), "%s/coord.secret", job_dir);
	sfd = open(spath, O_RDONLY | O_CLOEXEC);
	if (sfd < 0 || read(sfd, secret, 32) != 32) {
		fprintf(stderr, "stasis-node: cannot read the job's secret %s\n", spath);
		return 1;
	}
	close(sfd);
	if (sources < 1)
		sources = 1;
	lfd = listen_any(&port, sources);
	if (lfd < 0) {
		fprintf(stderr, "stasis-node: cannot listen: %s\n", strerror(-lfd));
		return 1;
	}
	/* the pid as this node sees it, and its start time: a receiver that
	 * stops answering is killed there (migrate.h), not only its remote
	 * shell, and no other process that took the pid since */
	printf("PORT %d %d %llu\n", port, (int)getpid(), start_time());
	fflush(stdout);
	watched_out = 1;
	src = calloc((size_t)sources, sizeof(*src));
	/* every source at once, each in its thread: a rank whose image is
	 * taken whole by the socket buffers waits for its answer no longer
	 * than its own image takes */
	for (; src && nsrc < sources; nsrc++) {
		int w = wait_in(lfd, ACCEPT_TIMEOUT_MS);

		if (w || (fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0) {
			snprintf(why, sizeof(why), w == -ECANCELED ? "cancelled: the pipe to its "
				 "remote shell closed" : "no source came within %d s",
				 ACCEPT_TIMEOUT_MS / 1000);
			break;
		}
		progress_timeout(fd);
		src[nsrc].fd = fd;
		src[nsrc].secret = secret;
		src[nsrc].started = pthread_create(&src[nsrc].t, NULL, serve_thread,
						   &src[nsrc]) == 0;
		if (!src[nsrc].started)
			serve_thread(&src[nsrc]);
	}
	close(lfd);
	for (int i = 0; src && i < nsrc; i++) {
		if (src[i].started)
			pthread_join(src[i].t, NULL);
		if (src[i].ret && !why[0])
			snprintf(why, sizeof(why), "%s", src[i].ret == -ECANCELED ? "cancelled: the "
				 "pipe to its remote shell closed" : src[i].ret == -ETIMEDOUT ||
				 src[i].ret == -EPIPE ? "the source went away" : src[i].why);
	}
	free(src);
	if (!src || why[0]) {
		fprintf(stderr, "stasis-node: migration not received: %s\n",
			!src ? "out of memory" : why);
		return 1;
	}
	return 0;
}

/* ---- the receiver as a node agent starts it (a move into spares) ---- */

extern char **environ;

int node_receiver_start(struct node_receiver *r, const char *job_dir, unsigned sources)
{
	char self[PATH_MAX], n[16], *argv[] = { self, "--receive", (char *)job_dir, n, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none;
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int p[2], ret;

	*r = (struct node_receiver){ .out = -1, .pidfd = -1 };
	if (len <= 0)
		return err_set(-errno, "cannot find the node agent's program: %s", strerror(errno));
	self[len] = 0;
	snprintf(n, sizeof(n), "%u", sources);
	if (pipe2(p, O_CLOEXEC) != 0)
		return err_set(-errno, "pipe: %s", strerror(errno));
	/* none of the agent's descriptors (all close on exec), its signals
	 * unblocked; SIGPIPE stays ignored (an answer to a source that went
	 * fails, it does not kill the receiver) */
	sigemptyset(&none);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	posix_spawnattr_init(&at);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
	ret = posix_spawn(&r->pid, self, &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(p[1]);
	if (ret) {
		close(p[0]);
		r->pid = 0;
		return err_set(-ret, "cannot start %s --receive: %s", self, strerror(ret));
	}
	r->out = p[0];
	r->pidfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
	return 0;
}

int node_receiver_output(struct node_receiver *r, char *port, size_t len)
{
	ssize_t got = r->out < 0 ? 0 : read(r->out, r->buf + r->len, sizeof(r->buf) - 1 - r->len);
	int said = 0;
	char *nl;

	if (got <= 0) {
		if (got < 0 && errno == EINTR)
			return 0;
		if (r->out >= 0)
			close(r->out);
		r->out = -1;
		return -1;
	}
	r->len += (size_t)got;
	r->buf[r->len] = 0;
	/* each whole line; one longer than the buffer is cut where it fills */
	while ((nl = strchr(r->buf, '\n')) || r->len == sizeof(r->buf) - 1) {
		size_t end = nl ? (size_t)(nl - r->buf) : r->len;

		r->buf[end] = 0;
		if (!strncmp(r->buf, "PORT ", 5)) {
			snprintf(port, len, "%s", r->buf + 5);
			said = 1;
		} else if (r->buf[0]) {
			snprintf(r->why, sizeof(r->why), "%s", strncmp(r->buf, "stasis-node: ", 13) ?
				 r->buf : r->buf + 13);
		}
		end += nl != NULL;
		memmove(r->buf, r->buf + end, r->len - end + 1);
		r->len -= end;
	}
	return said;
}

void node_receiver_cancel(struct node_receiver *r, int ms)
{
	if (!r->pid)
		return;
	if (r->out >= 0)
		close(r->out);
	r->out = -1;
	/* without a pidfd its end cannot be seen: killed at once */
	r->kill_at = mono_ms() + (uint64_t)(r->pidfd >= 0 ? ms : 0);
	if (r->pidfd < 0)
		kill(r->pid, SIGKILL);
}

int node_receiver_reap(struct node_receiver *r, int *status)
{
	int st = 0;
	pid_t got;

	if (!r->pid)
		return 0;
	if (r->kill_at && mono_ms() >= r->kill_at)
		kill(r->pid, SIGKILL);
	/* without a pidfd the pipe's end says it is ending: wait for it */
	while ((got = waitpid(r->pid, &st, r->pidfd < 0 && r->out < 0 ? 0 : WNOHANG)) < 0 &&
	       errno == EINTR)
		;
	if (got == 0)
		return 0;
	*status = got < 0 ? 127 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (r->out >= 0)
		close(r->out);
	if (r->pidfd >= 0)
		close(r->pidfd);
	r->out = r->pidfd = -1;
	r->pid = 0;
	r->kill_at = 0;   /* the agent looks every 100 ms while it is set */
	return 1;
}

/* ---- a moving rank's side: its image streamed while it is written ---- */

int node_migrate_stream_open(const char *addr, const char *secret, const char *path,
			     struct node_migrate_stream *s)
{
	char line[PATH_MAX + 64];
	int n, ret = line_connect(addr, "the migration's receiver", &s->fd);

	s->bytes = 0;
	if (ret)
		return ret;
	progress_timeout(s->fd);
	n = snprintf(line, sizeof(line), "MIGRATE %s\nIMAGE - %s\n", secret, path);
	if (n >= (int)sizeof(line) || (ret = write_all(s->fd, line, (size_t)n)) != 0) {
		close(s->fd);
		s->fd = -1;
		return err_set(ret ? ret : -ENAMETOOLONG, "cannot reach the migration's receiver at %s",
			       addr);
	}
	return 0;
}

int node_migrate_stream_write(void *ctx, const void *buf, size_t len)
{
	struct node_migrate_stream *s = ctx;
	int ret = write_all(s->fd, buf, len);

	if (ret == -EAGAIN)
		return err_set(-ETIMEDOUT, "the migration's receiver took nothing for %d s",
			       PROGRESS_TIMEOUT_MS / 1000);
	if (ret)
		return err_set(ret, "the migration's receiver closed the connection");
	s->bytes += len;
	return 0;
}

void node_migrate_stream_cut(struct node_migrate_stream *s)
{
	if (s->fd >= 0)
		shutdown(s->fd, SHUT_RDWR);
}

int node_migrate_stream_close(struct node_migrate_stream *s, int failed)
{
	int wait_ms = node_migrate_answer_ms(s->bytes), ret = 0;
	char line[512];

	if (s->fd < 0)
		return 0;
	/* the end of the image: the receiver checks it and answers */
	if (!failed && shutdown(s->fd, SHUT_WR) != 0)
		ret = err_set(-errno, "the migration's receiver: %s", strerror(errno));
	if (!failed && !ret && (ret = get_line(s->fd, line, sizeof(line), wait_ms)) == -ETIMEDOUT)
		ret = err_set(ret, "the migration's receiver did not confirm the image within %d s",
			      wait_ms / 1000);
	else if (!failed && ret)
		ret = err_set(ret, "the migration's receiver went before it confirmed the image");
	if (!failed && !ret && strcmp(line, "OK"))
		ret = err_set(-EIO, "the migration's receiver refused the image: %s",
			      strncmp(line, "ERR ", 4) ? line : line + 4);
	close(s->fd);
	s->fd = -1;
	return ret;
}
