/*
 * sandbox-launch: starts a sandbox (holder) and runs commands in it (enter), in one process each;
 * or runs one command in a sandbox of its own that ends with it (run).
 *
 * Why native: the util-linux + bubblewrap chain it replaces exec'd about eleven programs per sandbox
 * start and six per command (prlimit, sh, unshare, newuidmap, newgidmap, mount, bwrap, nsenter ...),
 * which measured 3.7-5.7x a bare bwrap. Every step here is a syscall in one process, in the order
 * bubblewrap uses; rootless hosts still exec newuidmap/newgidmap, which only they may do.
 *
 *   sandbox-launch holder [common] --uid-map START:COUNT --gid-map START:COUNT --upper DIR
 *       --merged DIR --lower OVERLAY_LOWERDIR [--tmpfs-size BYTES] [--volatile 1] [--from-tar-fd N]
 *       [--net none|host] --hostname NAME --workdir DIR --info-fd N [--idmap-lowers 1]
 *       [--bind-source PATH --bind-target PATH [--bind-readonly 0|1]]...
 *   sandbox-launch serve     (starts holders on request; see serve_main)
 *   sandbox-launch enter [common] --holder PID --init PID --pidns-fd N --status-fd N
 *       [--net none|host] --workdir DIR [--cap NAME]... [--user UID:GID] [--env K=V]... [--pty 1 [--pty-size ROWS:COLS] [--pty-echo 0]] -- ARGV...
 *   sandbox-launch run [common] [holder's options but --info-fd and --from-tar-fd] --status-fd N
 *       [--cap NAME]... [--user UID:GID] [--env K=V]... -- ARGV...
 *   sandbox-launch own-run [run's options but --status-fd] [--timeout-ms N] [--oom-events FILE]
 *       [--cleanup-cgroup DIR | --cleanup-rmdir DIR | --cleanup-unlink FILE]... -- ARGV...
 *   sandbox-launch userns --uid-map START:COUNT --gid-map START:COUNT [--self-first 1] -- ARGV...
 *   sandbox-launch idmap-probe --uid-map START:COUNT --gid-map START:COUNT -- DIR
 *   common: [--rlimit NAME=SOFT:HARD]... [--nice 0-19] [--cgroup PROCS_FILE]...
 *
 * holder: joins the cgroups, sets rlimits, makes a user namespace mapping in-sandbox ids 0..COUNT-1
 * to the subordinate range (written from outside: directly as root, else by newuidmap/newgidmap),
 * then a private mount namespace with the size-capped tmpfs upper and the overlay root (this
 * namespace keeps the host view, so the runtime can reach the upper dir). It then forks the
 * sandbox's init into new pid/mount/ipc/uts(/net) namespaces; init mounts /proc and a minimal /dev,
 * forbids nested user namespaces, pivots into the overlay, drops every capability, sets
 * no_new_privs, says "ready" on stdout and lives (reaping orphans) until its stdin - a pipe from
 * the runtime - closes. The holder reports
 * {"child-pid": INIT} on the info fd and exits when init does.
 *
 * enter: joins the cgroups, sets rlimits, joins the holder's user namespace and init's mount
 * (already pivoted), net, ipc and uts namespaces, takes a private copy of the mount namespace,
 * then forks into a fresh pid namespace nested in the sandbox's, whose pid 1 mounts its own /proc
 * and runs the command as pid 2 (so one SIGKILL to that pid 1 ends the command's whole tree), in
 * a session keyring of its own (not the runtime's), with only the kept capabilities. It
 * reports {"child-pid": NESTED_PID1} and, once the command ends, {"exit-code": N} (128+signal for
 * a signal) on the status fd, like bubblewrap's --json-status-fd. A command that could not be
 * started (workdir, exec) gets no exit-code: the error goes to stderr and the exit status is, as
 * shells have it, 127 for a program not found, 126 for one found but not runnable, else 125.
 * --pty 1 (interactive shells): the command's stdio is a terminal of the sandbox's own devpts, its
 * controlling terminal, relayed to ours (put in raw mode meanwhile): Ctrl-C and job control act on
 * the command's foreground job inside, not on the sandbox. --pty-size sets its size (else it takes
 * ours, when ours is a terminal); --pty-echo 0 turns its echo off before the command starts (a
 * program driving a shell through it, as pexpect's echo=False: input typed ahead is never echoed).
 * Every process of the chain dies with its parent (PR_SET_PDEATHSIG), so killing the enter
 * process ends everything it started.
 *
 * run: a holder and an enter in one process chain, for a sandbox that lives as long as one command:
 * the holder's steps (same order, same isolation), then its init, which - out of the caller's
 * session and not dumpable - sets up as the holder's does (the workdir made without capabilities
 * in effect, as there), forks the command, drops every capability, wipes its own command line
 * (host paths, the command's environment) and reaps; the command execs only after that. It gets
 * what enter gives one (setsid, env, workdir, user, kept caps, session keyring, seccomp,
 * close_range; RLIMIT_NPROC set inside the user namespace) as the init's child, pid 2: no nested
 * pid namespace, since the sandbox has no other process. When it ends, init exits with its status
 * (the kernel ends what it left) and so do we. Its stdio is ours (the caller's), never relayed.
 * The status fd gets {"child-pid": INIT} (one SIGKILL to it ends the sandbox) and {"exit-code": N},
 * or, for a command that could not start, the error on stderr and 127/126/125 as enter does. The
 * launcher dies with its parent, and the chain with it.
 *
 * --idmap-lowers 1 (root only): the lower dirs hold layers laid out once with their real owners; each
 * is mounted idmapped through the sandbox's own user namespace (real id k shows as START + k on the
 * host, so as k inside), and the overlay is built on those mounts (see mount_idmapped_lowers).
 *
 * --bind-source/--bind-target: host paths bind-mounted into the sandbox, read-only unless
 * --bind-readonly 0 follows; see sandbox-launch-binds.c.
 *
 * idmap-probe: exits 0 if DIR can be mounted idmapped here (root, kernel >= 5.12, a file system
 * that supports it), else prints why and exits 4. Mounts nothing.
 *
 * userns: runs ARGV as root of a user namespace mapping ids 0..COUNT-1 to the subordinate range
 * and id COUNT to the caller's own uid and gid, nothing else. An unprivileged user lays out and
 * removes layer trees through it: files get subordinate owners (what the sandboxes see as theirs),
 * while the store's own directories, owned by the caller, stay writable. --self-first 1 maps the
 * caller's own ids at 0 and the range at 1..COUNT instead: ARGV is then the caller itself, what it
 * makes is the caller's, yet as the namespace's root it may read every file of the range whatever
 * its mode (a rootless sandbox's 0600 files and 0700 dirs: what a snapshot captures).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/*
 * Every list an option builds (rlimits, cgroups, capabilities, variables, cleanup steps) has room
 * for as many entries as there are arguments (parse_args allocates it so): what bounds a command
 * line is the kernel's limit for an exec (ARG_MAX), never a count of ours.
 */
/* One --bind-source with its --bind-target and --bind-readonly (see sandbox-launch-binds.c). */
struct bind_opt {
  const char *source, *target;
  int readonly;
  /* the detached clone of the source (bind_tree), -1 until there is one */
  int tree;
};

struct opts {
  const char *mode;
  struct rlimit_opt { int resource; rlim_t soft, hard; } *rlimits;
  int n_rlimits;
  int nice;
  const char **cgroups;
  int n_cgroups;
  /* holder */
  unsigned long uid_start, uid_count, gid_start, gid_count;
  const char *upper, *merged, *lower, *tmpfs_size, *hostname, *workdir;
  int from_tar_fd, info_fd, net_none, volatile_upper, idmap_lowers;
  /* How many of the top lower dirs are the sandbox's own earlier writes (a fork's frozen copies). */
  unsigned long own_lowers;
  /* host paths bind-mounted into the sandbox (sandbox-launch-binds.c) */
  struct bind_opt *binds;
  int n_binds;
  /* userns: also map the caller's own ids, at COUNT (or, self_first, at 0 with the range above) */
  int map_self, self_first;
  uid_t self_uid;
  gid_t self_gid;
  /* enter */
  pid_t holder, init;
  int pidns_fd, status_fd, pty, pty_no_echo;
  unsigned long pty_rows, pty_cols;
  const char **caps;
  int n_caps;
  int has_user;
  uid_t user_uid;
  gid_t user_gid;
  const char **env;
  int n_env;
  char **argv;
  /* own-run */
  unsigned long timeout_ms;
  const char *oom_events;
  struct cleanup_opt { char op; const char *path; } *cleanup;
  int n_cleanup;
};

static const char *prog = "minisandbox sandbox-launch";
/* main's arguments, which a one-shot sandbox's init wipes (see run_init_main). */
static int main_argc;
static char **main_argv;
/*
 * Where a failure inside an enter chain is reported: a pipe the outer process reads, so that a
 * setup failure is never mistaken for the command's own exit status 125. -1: stderr.
 */
static int report_fd = -1;

static void die(const char *fmt, ...) {
  int err = errno;
  char msg[1024];
  va_list ap;
  int n = snprintf(msg, sizeof msg, "%s: ", prog);
  va_start(ap, fmt);
  n += vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  if (err != 0 && n < (int)sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, ": %s", strerror(err));
  if (report_fd >= 0) dprintf(report_fd, "%s", msg);
  else fprintf(stderr, "%s\n", msg);
  _exit(125);
}

static void usage(const char *what) {
  errno = 0;
  die("bad arguments (%s); this helper is run by the minisandbox runtime", what);
}

/* ---- arguments ---------------------------------------------------------------------------- */

static unsigned long parse_ul(const char *s, const char *what) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') usage(what);
  return v;
}

static void parse_pair(const char *s, unsigned long *a, unsigned long *b, const char *what) {
  char buf[64];
  if (strlen(s) >= sizeof buf) usage(what);
  strcpy(buf, s);
  char *colon = strchr(buf, ':');
  if (colon == NULL) usage(what);
  *colon = '\0';
  *a = parse_ul(buf, what);
  *b = parse_ul(colon + 1, what);
}

static const struct { const char *name; int resource; } rlimit_names[] = {
  {"nofile", RLIMIT_NOFILE}, {"nproc", RLIMIT_NPROC}, {"as", RLIMIT_AS}, {"core", RLIMIT_CORE},
  {"fsize", RLIMIT_FSIZE}, {"stack", RLIMIT_STACK}, {"cpu", RLIMIT_CPU},
};

static void parse_rlimit(struct opts *o, const char *s) {
  const char *eq = strchr(s, '=');
  if (eq == NULL) usage("--rlimit");
  int resource = -1;
  for (size_t i = 0; i < sizeof rlimit_names / sizeof rlimit_names[0]; i++)
    if (strlen(rlimit_names[i].name) == (size_t)(eq - s) && strncmp(s, rlimit_names[i].name, eq - s) == 0) resource = rlimit_names[i].resource;
  if (resource < 0) usage("--rlimit name");
  unsigned long soft, hard;
  parse_pair(eq + 1, &soft, &hard, "--rlimit value");
  o->rlimits[o->n_rlimits].resource = resource;
  o->rlimits[o->n_rlimits].soft = soft;
  o->rlimits[o->n_rlimits].hard = hard;
  o->n_rlimits++;
}

/* calloc for what a process cannot go on without: its arguments' lists. */
static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n == 0 ? 1 : n, size);
  if (p == NULL) die("out of memory");
  return p;
}

static void parse_args(struct opts *o, int argc, char **argv) {
  memset(o, 0, sizeof *o);
  o->from_tar_fd = o->info_fd = o->pidns_fd = o->status_fd = -1;
  /* each option takes two arguments: half of argc bounds every list */
  size_t room = (size_t)(argc > 0 ? argc : 0) / 2 + 1;
  o->rlimits = xcalloc(room, sizeof *o->rlimits);
  o->cgroups = xcalloc(room, sizeof *o->cgroups);
  o->caps = xcalloc(room, sizeof *o->caps);
  o->env = xcalloc(room, sizeof *o->env);
  o->cleanup = xcalloc(room, sizeof *o->cleanup);
  o->binds = xcalloc(room, sizeof *o->binds);
  if (argc < 2) usage("mode");
  o->mode = argv[1];
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      o->argv = &argv[i + 1];
      break;
    }
    if (i + 1 >= argc) usage(a);
    const char *v = argv[++i];
    if (strcmp(a, "--rlimit") == 0) parse_rlimit(o, v);
    else if (strcmp(a, "--nice") == 0) {
      unsigned long n = parse_ul(v, a);
      if (n > 19) usage("--nice is 0 to 19");
      o->nice = (int)n;
    }
    else if (strcmp(a, "--cgroup") == 0) o->cgroups[o->n_cgroups++] = v;
    else if (strcmp(a, "--uid-map") == 0) parse_pair(v, &o->uid_start, &o->uid_count, a);
    else if (strcmp(a, "--gid-map") == 0) parse_pair(v, &o->gid_start, &o->gid_count, a);
    else if (strcmp(a, "--upper") == 0) o->upper = v;
    else if (strcmp(a, "--merged") == 0) o->merged = v;
    else if (strcmp(a, "--lower") == 0) o->lower = v;
    else if (strcmp(a, "--tmpfs-size") == 0) o->tmpfs_size = v;
    else if (strcmp(a, "--volatile") == 0) o->volatile_upper = strcmp(v, "1") == 0;
    else if (strcmp(a, "--idmap-lowers") == 0) o->idmap_lowers = strcmp(v, "1") == 0;
    else if (strcmp(a, "--self-first") == 0) o->self_first = strcmp(v, "1") == 0;
    else if (strcmp(a, "--own-lowers") == 0) o->own_lowers = parse_ul(v, a);
    else if (strcmp(a, "--bind-source") == 0) {
      /* read-only unless --bind-readonly 0 says otherwise */
      o->binds[o->n_binds] = (struct bind_opt){v, NULL, 1, -1};
      o->n_binds++;
    } else if (strcmp(a, "--bind-target") == 0 || strcmp(a, "--bind-readonly") == 0) {
      if (o->n_binds == 0) usage("--bind-target and --bind-readonly follow a --bind-source");
      if (a[7] == 't') o->binds[o->n_binds - 1].target = v;
      else o->binds[o->n_binds - 1].readonly = strcmp(v, "0") != 0;
    }
    else if (strcmp(a, "--from-tar-fd") == 0) o->from_tar_fd = (int)parse_ul(v, a);
    else if (strcmp(a, "--info-fd") == 0) o->info_fd = (int)parse_ul(v, a);
    else if (strcmp(a, "--net") == 0) {
      if (strcmp(v, "none") == 0) o->net_none = 1;
      else if (strcmp(v, "host") != 0) usage(a);
    } else if (strcmp(a, "--hostname") == 0) o->hostname = v;
    else if (strcmp(a, "--workdir") == 0) o->workdir = v;
    else if (strcmp(a, "--holder") == 0) o->holder = (pid_t)parse_ul(v, a);
    else if (strcmp(a, "--init") == 0) o->init = (pid_t)parse_ul(v, a);
    else if (strcmp(a, "--pidns-fd") == 0) o->pidns_fd = (int)parse_ul(v, a);
    else if (strcmp(a, "--status-fd") == 0) o->status_fd = (int)parse_ul(v, a);
    else if (strcmp(a, "--pty") == 0) o->pty = strcmp(v, "1") == 0;
    else if (strcmp(a, "--pty-size") == 0) parse_pair(v, &o->pty_rows, &o->pty_cols, a);
    else if (strcmp(a, "--pty-echo") == 0) o->pty_no_echo = strcmp(v, "0") == 0;
    else if (strcmp(a, "--cap") == 0) o->caps[o->n_caps++] = v;
    else if (strcmp(a, "--user") == 0) {
      unsigned long u, g;
      parse_pair(v, &u, &g, a);
      /* (uid_t)-1 is "leave unchanged" to setresuid/setresgid, and a cast would wrap 2^32 to 0:
       * either would run the command as the sandbox's root. Ids past the map fail at the switch. */
      if (u >= (uid_t)-1 || g >= (gid_t)-1) {
        errno = 0;
        die("user %s: an in-sandbox id is below %lu", v, (unsigned long)(uid_t)-1);
      }
      o->has_user = 1;
      o->user_uid = (uid_t)u;
      o->user_gid = (gid_t)g;
    } else if (strcmp(a, "--env") == 0) {
      if (strchr(v, '=') == NULL) usage(a);
      o->env[o->n_env++] = v;
    } else if (strcmp(a, "--timeout-ms") == 0) o->timeout_ms = parse_ul(v, a);
    else if (strcmp(a, "--oom-events") == 0) o->oom_events = v;
    else if (strcmp(a, "--cleanup-cgroup") == 0 || strcmp(a, "--cleanup-rmdir") == 0 || strcmp(a, "--cleanup-unlink") == 0) {
      if (v[0] != '/') usage(a);
      o->cleanup[o->n_cleanup].op = a[10];
      o->cleanup[o->n_cleanup++].path = v;
    } else usage(a);
  }
}

/* ---- small helpers ------------------------------------------------------------------------ */

/* snprintf for paths and options: too long is an error, never a silently cut path. */
static void xsnprintf(char *buf, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, cap, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap) {
    errno = ENAMETOOLONG;
    die("path or option too long");
  }
}

static void write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buf += n;
    len -= (size_t)n;
  }
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) die("open %s", path);
  ssize_t n = write(fd, text, strlen(text));
  if (n != (ssize_t)strlen(text)) die("write %s", path);
  close(fd);
}

/*
 * Sets the --rlimit values: all of them, or only RLIMIT_NPROC (`nproc` 1), or all but it (-1);
 * with all but it, the --nice value too. Nothing in the sandbox can lower that niceness again
 * (CAP_SYS_NICE of the host's namespace, or an RLIMIT_NICE above 0, which we never give).
 */
static void set_rlimits(const struct opts *o, int nproc) {
  if (nproc <= 0 && o->nice > 0 && setpriority(PRIO_PROCESS, 0, o->nice) < 0) die("setpriority");
  for (int i = 0; i < o->n_rlimits; i++) {
    int is_nproc = o->rlimits[i].resource == RLIMIT_NPROC;
    if ((nproc > 0 && !is_nproc) || (nproc < 0 && is_nproc)) continue;
    struct rlimit r = {o->rlimits[i].soft, o->rlimits[i].hard};
    if (setrlimit(o->rlimits[i].resource, &r) < 0) die("setrlimit");
  }
}

static void join_cgroups(const struct opts *o) {
  char pid[32];
  snprintf(pid, sizeof pid, "%d\n", getpid());
  for (int i = 0; i < o->n_cgroups; i++) write_file(o->cgroups[i], pid);
}

static void join_cgroups_and_limit(const struct opts *o) {
  join_cgroups(o);
  set_rlimits(o, 0);
}

/*
 * After entering a user namespace as a host id it does not map: become its root. newgidmap denies
 * setgroups when it maps the caller's own gid; the host's supplementary groups then stay, unmapped
 * (they grant nothing inside that the mapped root lacks).
 */
static void become_ns_root(int may_keep_groups) {
  if (setgroups(0, NULL) < 0 && !(may_keep_groups && errno == EPERM)) die("setgroups");
  if (setresgid(0, 0, 0) < 0) die("setresgid 0");
  if (setresuid(0, 0, 0) < 0) die("setresuid 0");
}

static pid_t fork_or_die(void) {
  pid_t p = fork();
  if (p < 0) die("fork");
  return p;
}

static int wait_status(pid_t pid) {
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return st;
}

/* Exit status the way a shell reports it: the code, or 128 + the signal. */
static int shell_status(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 125;
}

static void die_with_parent(void) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die("prctl PDEATHSIG");
}

/* Whether the write end of a pipe is still held (by the parent that created it). */
static int parent_alive(int rfd) {
  struct pollfd p = {rfd, POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

/* ---- capabilities ------------------------------------------------------------------------- */

static const char *cap_names[] = {
  "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
  "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
  "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
  "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
  "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
  "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
  "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
  "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
};
#define N_CAPS ((int)(sizeof cap_names / sizeof cap_names[0]))

static int cap_number(const char *name) {
  for (int i = 0; i < N_CAPS; i++)
    if (strcmp(cap_names[i], name) == 0) return i;
  errno = 0;
  die("unknown capability %s", name);
  return -1;
}

/*
 * Leaves only `keep` (a bitmask) in the bounding set and nothing ambient. Needs CAP_SETPCAP, so it
 * comes before any switch away from the namespace's root.
 */
static void restrict_bounding_set(uint64_t keep) {
  int last = N_CAPS - 1;
  FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
  if (f != NULL) {
    if (fscanf(f, "%d", &last) != 1) last = N_CAPS - 1;
    fclose(f);
  }
  for (int c = 0; c <= last; c++)
    if (c >= 64 || !(keep & (1ULL << c)))
      if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL) die("drop capability %d from the bounding set", c);
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) die("clear ambient capabilities");
}

/*
 * Sets permitted, effective and inheritable to exactly `keep` and no_new_privs: an exec as the
 * namespace's root then holds `keep`, an exec as any other id holds nothing, nothing can gain more.
 */
static void set_caps_final(uint64_t keep) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  for (int i = 0; i < 2; i++) {
    uint32_t bits = (uint32_t)(keep >> (32 * i));
    data[i].effective = data[i].permitted = data[i].inheritable = bits;
  }
  if (syscall(SYS_capset, &hdr, data) < 0) die("capset");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
}


/* ---- seccomp ------------------------------------------------------------------------------ */

#if defined(__x86_64__)
#define MSB_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define MSB_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/*
 * Syscalls a task never needs and that widen the kernel surface reachable from the sandbox (the
 * set container runtimes refuse by default): they fail with EPERM. Most would also need
 * capabilities the sandbox lacks; the filter keeps their code paths out of reach altogether.
 */
static const int denied_syscalls[] = {
  __NR_keyctl, __NR_add_key, __NR_request_key, __NR_bpf, __NR_perf_event_open, __NR_userfaultfd,
  __NR_io_uring_setup, __NR_io_uring_enter, __NR_io_uring_register, __NR_kexec_load,
  __NR_kexec_file_load, __NR_init_module, __NR_finit_module, __NR_delete_module, __NR_reboot,
  __NR_swapon, __NR_swapoff, __NR_acct, __NR_open_by_handle_at, __NR_name_to_handle_at,
  __NR_quotactl, __NR_fanotify_init, __NR_lookup_dcookie, __NR_fsopen, __NR_fsmount, __NR_fsconfig,
  __NR_fspick, __NR_move_mount, __NR_open_tree, __NR_mount_setattr,
#ifdef __NR_uselib
  __NR_uselib,
#endif
};

/* Installed last before the exec (no_new_privs is already set, so no privilege is needed). */
static void install_seccomp(void) {
#ifdef MSB_AUDIT_ARCH
  enum { N = sizeof denied_syscalls / sizeof denied_syscalls[0] };
  struct sock_filter prog_[N + 8];
  int k = 0;
  prog_[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  /* Another ABI (e.g. 32-bit syscalls on x86-64) would bypass the numbers below: refuse it. */
  prog_[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MSB_AUDIT_ARCH, 1, 0);
  prog_[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
  prog_[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
#if defined(__x86_64__)
  /* x32 syscalls share the architecture but set this bit. */
  prog_[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1);
  prog_[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
#endif
  for (int i = 0; i < N; i++) prog_[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)denied_syscalls[i], (unsigned char)(N - i), 0);
  prog_[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  prog_[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
  struct sock_fprog fprog = {(unsigned short)k, prog_};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0) < 0) die("install the seccomp filter");
#endif
}

/* ---- holder ------------------------------------------------------------------------------- */

static void run_quiet(char *const argv[]) {
  pid_t p = fork_or_die();
  if (p == 0) {
    execvp(argv[0], argv);
    fprintf(stderr, "%s: cannot run %s: %s\n", prog, argv[0], strerror(errno));
    _exit(127);
  }
  int st = wait_status(p);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    errno = 0;
    die("%s failed (status %d)", argv[0], shell_status(st));
  }
}

/* Runs in a child that stayed in the parent user namespace: only it may write `target`'s maps. */
static void write_id_maps(pid_t target, const struct opts *o) {
  char pid[32], path[64], line[96], us[32], uc[32], gs[32], gc[32];
  snprintf(pid, sizeof pid, "%d", target);
  if (geteuid() == 0) {
    xsnprintf(path, sizeof path, "/proc/%d/uid_map", target);
    if (o->self_first) xsnprintf(line, sizeof line, "0 %lu 1\n1 %lu %lu\n", (unsigned long)o->self_uid, o->uid_start, o->uid_count);
    else if (o->map_self) xsnprintf(line, sizeof line, "0 %lu %lu\n%lu %lu 1\n", o->uid_start, o->uid_count, o->uid_count, (unsigned long)o->self_uid);
    else xsnprintf(line, sizeof line, "0 %lu %lu\n", o->uid_start, o->uid_count);
    write_file(path, line);
    xsnprintf(path, sizeof path, "/proc/%d/gid_map", target);
    if (o->self_first) xsnprintf(line, sizeof line, "0 %lu 1\n1 %lu %lu\n", (unsigned long)o->self_gid, o->gid_start, o->gid_count);
    else if (o->map_self) xsnprintf(line, sizeof line, "0 %lu %lu\n%lu %lu 1\n", o->gid_start, o->gid_count, o->gid_count, (unsigned long)o->self_gid);
    else xsnprintf(line, sizeof line, "0 %lu %lu\n", o->gid_start, o->gid_count);
    write_file(path, line);
    return;
  }
  char su[32], sg[32];
  snprintf(us, sizeof us, "%lu", o->uid_start);
  snprintf(uc, sizeof uc, "%lu", o->uid_count);
  snprintf(gs, sizeof gs, "%lu", o->gid_start);
  snprintf(gc, sizeof gc, "%lu", o->gid_count);
  snprintf(su, sizeof su, "%lu", (unsigned long)o->self_uid);
  snprintf(sg, sizeof sg, "%lu", (unsigned long)o->self_gid);
  char *uargv[] = {"newuidmap", pid, "0", us, uc, uc, su, "1", NULL};
  char *gargv[] = {"newgidmap", pid, "0", gs, gc, gc, sg, "1", NULL};
  char *ufirst[] = {"newuidmap", pid, "0", su, "1", "1", us, uc, NULL};
  char *gfirst[] = {"newgidmap", pid, "0", sg, "1", "1", gs, gc, NULL};
  if (!o->map_self) uargv[5] = gargv[5] = NULL;
  run_quiet(o->self_first ? ufirst : uargv);
  run_quiet(o->self_first ? gfirst : gargv);
}

/* ---- idmapped lower layers ---------------------------------------------------------------- */

#define MAX_LOWERS 256

/* The overlay lowerdir option (paths joined by ':', top first) split into `paths` (within `buf`). */
static int split_lowers(const char *lower, char *buf, size_t cap, char **paths) {
  xsnprintf(buf, cap, "%s", lower);
  int n = 0;
  for (char *s = buf, *save = NULL, *tok; (tok = strtok_r(s, ":", &save)) != NULL; s = NULL) {
    if (n >= MAX_LOWERS) usage("too many lower dirs");
    paths[n++] = tok;
  }
  if (n == 0) usage("--lower");
  return n;
}

/*
 * A detached, read-only clone of the mount of `path` whose owners are mapped through `userns_fd`:
 * an id k on disk shows as the host id that user namespace maps k to. Needs CAP_SYS_ADMIN in the
 * initial user namespace, so only the mapper (which never left it) can make one. Returns the
 * mount's fd, or -1 with errno set.
 */
static int idmapped_clone(const char *path, int userns_fd) {
  int t = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (t < 0) return -1;
  struct mount_attr a;
  memset(&a, 0, sizeof a);
  /* nodev, nosuid: nothing of a layer acts as a device or a privilege, whatever it holds. */
  a.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  a.userns_fd = (uint64_t)userns_fd;
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &a, sizeof a) < 0) {
    int e = errno;
    close(t);
    errno = e;
    return -1;
  }
  return t;
}

static void send_fd(int sock, int fd) {
  char byte = 'm';
  struct iovec iov = {&byte, 1};
  char ctrl[CMSG_SPACE(sizeof(int))];
  memset(ctrl, 0, sizeof ctrl);
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof ctrl;
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (sendmsg(sock, &msg, MSG_NOSIGNAL) != 1) die("hand an idmapped layer mount to the holder");
}

/* One fd sent by send_fd; -1 once the sender is gone without sending it. */
static int receive_fd(int sock) {
  char byte;
  struct iovec iov = {&byte, 1};
  char ctrl[CMSG_SPACE(sizeof(int))];
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof ctrl;
  ssize_t got;
  do got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  if (got != 1) return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  if (c == NULL || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

#include "sandbox-launch-binds.c"

/*
 * In the mapper, once the maps of `target`'s user namespace are written (an idmapping copies the
 * maps when it is made): with --idmap-lowers, an idmapped clone of each lower dir through that
 * namespace, then (as root) the clone of each bind source (bind_tree), handed to the holder in
 * order. The holder, root of that namespace only, could not make them itself.
 */
static void send_mapper_mounts(pid_t target, const struct opts *o, int sock) {
  char p[64];
  xsnprintf(p, sizeof p, "/proc/%d/ns/user", target);
  int ns = open(p, O_RDONLY | O_CLOEXEC);
  if (ns < 0) die("open %s", p);
  if (o->idmap_lowers) {
    char buf[16384];
    char *paths[MAX_LOWERS];
    int n = split_lowers(o->lower, buf, sizeof buf, paths);
    for (int i = 0; i < n; i++) {
      int t = idmapped_clone(paths[i], ns);
      if (t < 0) die("idmapped mount of layer %s", paths[i]);
      send_fd(sock, t);
      close(t);
    }
  }
  if (geteuid() == 0) send_bind_trees(o, ns, sock);
  close(ns);
}

/*
 * In the holder, in its own mount namespace: attaches the idmapped lowers received from the
 * mapper at <upper>/l/<i> (inside the upper's tmpfs, or the sandbox's own dir) and writes the
 * overlay lowerdir option naming them, top first as given. The store's paths are never resolved
 * by the sandbox's ids, so the store need not be reachable by them.
 */
static void mount_idmapped_lowers(const struct opts *o, int sock, char *lowerdir, size_t cap) {
  char buf[16384], dir[4096], mp[4096];
  char *paths[MAX_LOWERS];
  int n = split_lowers(o->lower, buf, sizeof buf, paths);
  xsnprintf(dir, sizeof dir, "%s/l", o->upper);
  if (mkdir(dir, 0755) < 0 && errno != EEXIST) die("mkdir %s", dir);
  size_t len = 0;
  lowerdir[0] = '\0';
  for (int i = 0; i < n; i++) {
    int t = receive_fd(sock);
    if (t < 0) {
      errno = 0;
      die("the idmapped mount of layer %s never arrived", paths[i]);
    }
    xsnprintf(mp, sizeof mp, "%s/%d", dir, i);
    if (mkdir(mp, 0755) < 0 && errno != EEXIST) die("mkdir %s", mp);
    if (syscall(SYS_move_mount, t, "", AT_FDCWD, mp, MOVE_MOUNT_F_EMPTY_PATH) < 0) die("attach the idmapped mount of layer %s", paths[i]);
    close(t);
    xsnprintf(lowerdir + len, cap - len, "%s%s", i == 0 ? "" : ":", mp);
    len += strlen(lowerdir + len);
  }
}

/*
 * Over shifted layers the holder mounts the lower dirs itself, as root of the sandbox's user
 * namespace: a subordinate uid, with no right to the store above them (0700, its owner's alone; a
 * host process of that uid must reach no layer file, issue 25). So each lower dir is opened first,
 * in the holder's new mount namespace (overlayfs takes only lower dirs of the mounter's own) but
 * while the holder is still the store's owner's uid (host root, or the rootless user), and the
 * overlay is given them as /proc/self/fd/N: the kernel resolves such a link to the open dir itself,
 * without walking (or checking) the path above it again. Returns how many; close-on-exec.
 */
static int open_lowers(const struct opts *o, int *fds) {
  char buf[16384];
  char *paths[MAX_LOWERS];
  int n = split_lowers(o->lower, buf, sizeof buf, paths);
  for (int i = 0; i < n; i++) {
    fds[i] = open(paths[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fds[i] < 0) die("open lower dir %s", paths[i]);
  }
  return n;
}

/* The overlay lowerdir option naming the lower dirs open_lowers opened, top first; closes nothing. */
static void lowers_by_fd(const int *fds, int n, char *lowerdir, size_t cap) {
  size_t len = 0;
  lowerdir[0] = '\0';
  for (int i = 0; i < n; i++) {
    xsnprintf(lowerdir + len, cap - len, "%s/proc/self/fd/%d", i == 0 ? "" : ":", fds[i]);
    len += strlen(lowerdir + len);
  }
}

/*
 * `idmap_sock` >= 0: the mapper also sends the holder the mounts only it can make on it (see
 * send_mapper_mounts). `before_root`, if given, runs once the maps are written, still as
 * the caller's host uid (with every capability in the new namespace, none over files outside it).
 */
static void enter_user_namespace_with(const struct opts *o, int idmap_sock, void (*before_root)(void *), void *arg) {
  int go[2];
  if (pipe2(go, O_CLOEXEC) < 0) die("pipe");
  pid_t self = getpid();
  pid_t mapper = fork_or_die();
  if (mapper == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(1);
    write_id_maps(self, o);
    if (idmap_sock >= 0) send_mapper_mounts(self, o, idmap_sock);
    _exit(0);
  }
  close(go[0]);
  if (unshare(CLONE_NEWUSER) < 0) die("unshare a user namespace");
  write_all(go[1], "x", 1);
  close(go[1]);
  int st = wait_status(mapper);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    errno = 0;
    die(idmap_sock >= 0 ? "writing the uid_map/gid_map of the sandbox or making its idmapped layers or bind mounts failed"
                        : "writing the uid_map/gid_map of the sandbox failed");
  }
  if (before_root != NULL) before_root(arg);
  become_ns_root(o->map_self);
  /*
   * The credential change made this process non-dumpable, which would stop the runtime (when it is
   * not root) from opening our namespaces to enter them. Nothing inside the sandbox can address
   * this process: it lives in the host's pid namespace.
   */
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

static void enter_user_namespace(const struct opts *o) {
  enter_user_namespace_with(o, -1, NULL, NULL);
}

static void extract_tar(const struct opts *o, const char *dest) {
  pid_t p = fork_or_die();
  if (p == 0) {
    if (dup2(o->from_tar_fd, 0) < 0) die("dup2");
    char *argv[] = {"tar", "-C", (char *)dest, "--xattrs", "--xattrs-include=user.*", "--numeric-owner", "-xpf", "-", NULL};
    execvp(argv[0], argv);
    die("exec tar");
  }
  int st = wait_status(p);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    errno = 0;
    die("extracting the forked upper dir failed");
  }
}

/*
 * The mount destinations inside the merged root must be real directories of ours: a layer (or a
 * forked upper) that planted a symlink or a file there is overruled, so no mount can be redirected.
 */
static void claim_mount_points(int rootfd) {
  static const char *dirs[] = {"proc", "dev", "tmp", "sys"};
  for (int i = 0; i < 4; i++) {
    struct stat st;
    if (fstatat(rootfd, dirs[i], &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISDIR(st.st_mode)) continue;
      if (unlinkat(rootfd, dirs[i], 0) < 0) die("remove non-directory /%s of the sandbox root", dirs[i]);
    } else if (errno != ENOENT) die("stat /%s of the sandbox root", dirs[i]);
    if (mkdirat(rootfd, dirs[i], 0755) < 0) die("mkdir /%s in the sandbox root", dirs[i]);
    if (strcmp(dirs[i], "tmp") == 0 && fchmodat(rootfd, dirs[i], 01777, 0) < 0) die("chmod /tmp");
  }
}

static void mount_or_die(const char *src, const char *dst, const char *type, unsigned long flags, const char *data) {
  if (mount(src, dst, type, flags, data) < 0) die("mount %s on %s", type != NULL ? type : src, dst);
}

/*
 * A read-only /sys: tools read CPU, memory and device facts there. With a network namespace of
 * our own, a fresh sysfs (its net class shows only that namespace's devices); sharing the host's
 * network, sysfs cannot be mounted anew, so the host's is bound and made read-only (what it holds
 * beneath, like cgroup files, belongs to host ids the sandbox does not map: not writable either).
 */
static void setup_sys(const char *sys, int own_net) {
  const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY;
  if (own_net) {
    mount_or_die("sysfs", sys, "sysfs", flags, NULL);
    return;
  }
  mount_or_die("/sys", sys, NULL, MS_BIND | MS_REC, NULL);
  mount_or_die("/sys", sys, NULL, MS_REMOUNT | MS_BIND | flags, NULL);
}

/*
 * Every tmpfs is capped: /dev holds only the nodes below (a task writing there is capped at
 * DEV_TMPFS_SIZE), and /dev/shm is a directory of the sandbox's upper dir (bound from the host
 * side), so what a task writes to it counts against the same --disk budget as its other writes.
 */
#define DEV_TMPFS_OPTIONS "mode=755,size=1m,nr_inodes=4096"

static void setup_dev(const char *dev, const char *upper) {
  char p[4096], q[64], q2[4096];
  mount_or_die("msb-dev", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, DEV_TMPFS_OPTIONS);
  static const char *nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
  for (int i = 0; i < 6; i++) {
    xsnprintf(p, sizeof p, "%s/%s", dev, nodes[i]);
    xsnprintf(q, sizeof q, "/dev/%s", nodes[i]);
    int fd = open(p, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) die("create %s", p);
    close(fd);
    mount_or_die(q, p, NULL, MS_BIND, NULL);
  }
  xsnprintf(p, sizeof p, "%s/pts", dev);
  if (mkdir(p, 0755) < 0) die("mkdir %s", p);
  mount_or_die("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620");
  xsnprintf(p, sizeof p, "%s/shm", dev);
  if (mkdir(p, 0755) < 0 || chmod(p, 01777) < 0) die("mkdir %s", p);
  xsnprintf(q2, sizeof q2, "%s/shm", upper);
  if ((mkdir(q2, 0755) < 0 && errno != EEXIST) || chmod(q2, 01777) < 0) die("mkdir %s", q2);
  mount_or_die(q2, p, NULL, MS_BIND, NULL);
  static const char *links[][2] = {
    {"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
    {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}, {"/proc/kcore", "core"},
  };
  for (int i = 0; i < 6; i++) {
    xsnprintf(p, sizeof p, "%s/%s", dev, links[i][1]);
    if (symlink(links[i][0], p) < 0) die("symlink %s", p);
  }
}

static void loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) die("socket");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) die("get flags of lo");
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) die("bring lo up");
  close(s);
}

/* mkdir -p, as the sandbox's unprivileged root, inside the pivoted root; failures are the command's. */
static void make_workdir(const char *workdir) {
  char buf[4096];
  if (workdir == NULL || strlen(workdir) >= sizeof buf) return;
  strcpy(buf, workdir);
  for (char *s = buf + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    mkdir(buf, 0755);
    *s = '/';
  }
  mkdir(buf, 0755);
}

/* SIGCHLD as a readable fd, for a poll loop that reaps children. */
static int child_exit_fd(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &set, NULL) < 0) die("sigprocmask");
  int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die("signalfd");
  return sfd;
}

static void init_loop(void) {
  int sfd = child_exit_fd();
  struct pollfd fds[2] = {{0, POLLIN, 0}, {sfd, POLLIN, 0}};
  char buf[256];
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    if (fds[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
      while (waitpid(-1, NULL, WNOHANG) > 0) {
      }
    }
    if (fds[0].revents) {
      ssize_t n = read(0, buf, sizeof buf);
      if (n <= 0 && !(n < 0 && errno == EINTR)) _exit(0);
    }
  }
}

/*
 * The sandbox's pid 1, up to the point where it is the sandbox's init: its own mount, ipc, uts
 * (and net) namespaces, /proc, /dev, /sys, no nested user namespaces, pivoted into the overlay.
 * Still the namespace's root with every capability: the caller drops them.
 */
static void init_setup(const struct opts *o, int parent_rfd) {
  die_with_parent();
  if (!parent_alive(parent_rfd)) _exit(1);
  close(parent_rfd);
  if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | (o->net_none ? CLONE_NEWNET : 0)) < 0) die("unshare mount/ipc/uts/net namespaces");
  if (o->hostname != NULL && sethostname(o->hostname, strlen(o->hostname)) < 0) die("sethostname");
  char p[4096];
  xsnprintf(p, sizeof p, "%s/proc", o->merged);
  mount_or_die("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  /*
   * No nested user namespaces: one would hand code in the sandbox a full capability set over new
   * namespaces, the kernel's largest attack surface for unprivileged users. The limit belongs to
   * the sandbox's user namespace and raising it needs CAP_SYS_RESOURCE there, which nothing keeps.
   */
  xsnprintf(p, sizeof p, "%s/proc/sys/user/max_user_namespaces", o->merged);
  write_file(p, "0");
  xsnprintf(p, sizeof p, "%s/dev", o->merged);
  setup_dev(p, o->upper);
  xsnprintf(p, sizeof p, "%s/sys", o->merged);
  setup_sys(p, o->net_none);
  if (chdir(o->merged) < 0) die("chdir %s", o->merged);
  if (syscall(SYS_pivot_root, ".", ".") < 0) die("pivot_root");
  if (umount2(".", MNT_DETACH) < 0) die("detach the host root");
  if (chdir("/") < 0) die("chdir /");
  if (o->net_none) loopback_up();
}

static void init_main(const struct opts *o, int holder_alive) {
  if (o->info_fd >= 0) close(o->info_fd);
  init_setup(o, holder_alive);
  restrict_bounding_set(0);
  set_caps_final(0);
  make_workdir(o->workdir);
  /* Only our stdin (the lifetime pipe) and the ready line on stdout are needed from here on. */
  syscall(SYS_close_range, 3, ~0U, 0);
  write_all(1, "ready\n", 6);
  init_loop();
}

/*
 * The sandbox's ids need reach no path of the store at all: the holder, still the store's owner
 * (host root, or the rootless user), moves into the sandbox's dir (the parent of --upper and
 * --merged), and every later path (the upper, the merged root, init's mounts, a fork's tar) is
 * relative to it, while the lower dirs come as open dirs (idmapped mounts, or open_lowers' fds), so
 * the dirs above it may be private to the owner. Lookups from the working directory check only the
 * components they walk.
 */
static void work_from_sandbox_dir(struct opts *o) {
  static char up[4096], mg[4096];
  const char *su = strrchr(o->upper, '/'), *sm = strrchr(o->merged, '/');
  if (su == NULL || sm == NULL || su == o->upper || su[1] == '\0' || sm[1] == '\0') return;
  if (su - o->upper != sm - o->merged || strncmp(o->upper, o->merged, (size_t)(su - o->upper)) != 0) return;
  char dir[4096];
  xsnprintf(dir, sizeof dir, "%.*s", (int)(su - o->upper), o->upper);
  if (chdir(dir) < 0) die("chdir %s", dir);
  xsnprintf(up, sizeof up, "%s", su + 1);
  xsnprintf(mg, sizeof mg, "%s", sm + 1);
  o->upper = up;
  o->merged = mg;
}

struct holder_mounts {
  struct opts *o;
  int lower_fds[MAX_LOWERS];
  int n_lower_fds;
  /* rootless: the bind sources are cloned here, while the holder is still the caller */
  int clone_binds;
};

/*
 * The holder's private mount namespace, made (owned by the sandbox's user namespace) before it
 * becomes the namespace's root; what it must open as the caller (lower dirs, bind sources) too.
 */
static void own_mount_namespace(void *arg) {
  struct holder_mounts *m = arg;
  if (unshare(CLONE_NEWNS) < 0) die("unshare a mount namespace");
  mount_or_die("none", "/", NULL, MS_REC | MS_PRIVATE, NULL);
  if (!m->o->idmap_lowers) m->n_lower_fds = open_lowers(m->o, m->lower_fds);
  if (m->clone_binds)
    for (int i = 0; i < m->o->n_binds; i++) m->o->binds[i].tree = bind_tree(&m->o->binds[i], -1);
}

/*
 * What a container runtime gives every container (Docker's "init layer", podman's run dir):
 * /etc/hosts naming localhost (v4 and v6) and the sandbox's hostname, /etc/hostname, and with the
 * host's network the host's /etc/resolv.conf (its nameservers are reachable: the network is
 * shared). A debootstrap base has no /etc/hosts, and without one `localhost` does not resolve:
 * servers that tests start on it fail. The files live in a directory of the sandbox's own beside
 * its upper (<upper>/e, in the upper's tmpfs when it has one), made by the sandbox's root, so they
 * are its root's in every id mapping, and stacked as the top lower dir: a command sees them over
 * whatever the layers hold, as in a container, and they are never part of the upper (diff,
 * snapshot, fork), unless a command edits one, which then writes its own copy as with any file.
 */
static void put_file(const char *dir, const char *name, const char *text, size_t len) {
  char p[4096];
  xsnprintf(p, sizeof p, "%s/%s", dir, name);
  int fd = open(p, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0 || fchmod(fd, 0644) < 0) die("create %s", p);
  write_all(fd, text, len);
  close(fd);
}

/* Up to cap - 1 bytes of a host file (NUL-terminated); 0 when it cannot be read. */
static size_t read_host_file(const char *path, char *buf, size_t cap) {
  size_t len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n;
    while (len < cap - 1 && ((n = read(fd, buf + len, cap - 1 - len)) > 0 || (n < 0 && errno == EINTR)))
      if (n > 0) len += (size_t)n;
    close(fd);
  }
  buf[len] = '\0';
  return len;
}

static void make_etc_layer(const struct opts *o, const char *dir) {
  char etc[4096];
  xsnprintf(etc, sizeof etc, "%s/etc", dir);
  if ((mkdir(dir, 0755) < 0 && errno != EEXIST) || chmod(dir, 0755) < 0) die("mkdir %s", dir);
  if (mkdir(etc, 0755) < 0 || chmod(etc, 0755) < 0) die("mkdir %s", etc);
  const char *name = o->hostname != NULL && o->hostname[0] != '\0' ? o->hostname : "localhost";
  static char hosts[65536 + 1024], host[65536];
  int n = snprintf(hosts, sizeof hosts,
                   "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                   "fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\n"
                   "ff02::2\tip6-allrouters\n127.0.1.1\t%s\n",
                   name);
  if (n < 0 || (size_t)n >= 1024) usage("--hostname");
  size_t len = (size_t)n;
  if (!o->net_none) {
    /* The host's names too, as with podman's host network: they resolve the same way there. */
    size_t h = read_host_file("/etc/hosts", host, sizeof host);
    if (h > 0) {
      len += (size_t)snprintf(hosts + len, sizeof hosts - len, "# the host's /etc/hosts\n");
      memcpy(hosts + len, host, h);
      len += h;
      if (host[h - 1] != '\n') hosts[len++] = '\n';
    }
  }
  put_file(etc, "hosts", hosts, len);
  char line[1024];
  n = snprintf(line, sizeof line, "%s\n", name);
  put_file(etc, "hostname", line, (size_t)n);
  if (!o->net_none) {
    size_t r = read_host_file("/etc/resolv.conf", host, sizeof host);
    if (r > 0) put_file(etc, "resolv.conf", host, r);
  }
}

/*
 * The holder's steps up to its init: cgroups and rlimits (all but RLIMIT_NPROC, see holderArgs in
 * commands.ts), the user namespace, a private mount namespace with the upper and the overlay root,
 * and a new pid namespace for the next child (the init).
 */
static void holder_setup(struct opts *o) {
  if (o->upper == NULL || o->merged == NULL || o->lower == NULL || o->uid_count == 0 || o->gid_count == 0) usage("needs --upper --merged --lower --uid-map --gid-map");
  check_binds(o);
  work_from_sandbox_dir(o);
  join_cgroups(o);
  set_rlimits(o, -1);
  /* root's bind sources are cloned by the mapper, in the initial user namespace (bind_tree) */
  int binds_by_mapper = o->n_binds > 0 && geteuid() == 0;
  struct holder_mounts m = {o, {0}, 0, o->n_binds > 0 && !binds_by_mapper};
  int idmap[2] = {-1, -1};
  if ((o->idmap_lowers || binds_by_mapper) && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, idmap) < 0) die("socketpair");
  enter_user_namespace_with(o, idmap[0], own_mount_namespace, &m);
  if (idmap[0] >= 0) close(idmap[0]);
  int *lower_fds = m.lower_fds, n_lower_fds = m.n_lower_fds;
  if (o->tmpfs_size != NULL) {
    char data[96];
    xsnprintf(data, sizeof data, "size=%s,mode=755", o->tmpfs_size);
    mount_or_die("msb-upper", o->upper, "tmpfs", MS_NOSUID | MS_NODEV, data);
  }
  char u[4096], w[4096], data[16384];
  xsnprintf(u, sizeof u, "%s/u", o->upper);
  xsnprintf(w, sizeof w, "%s/w", o->upper);
  if (mkdir(u, 0755) < 0 && errno != EEXIST) die("mkdir %s", u);
  if (mkdir(w, 0755) < 0 && errno != EEXIST) die("mkdir %s", w);
  if (o->from_tar_fd >= 0) {
    extract_tar(o, u);
    close(o->from_tar_fd);
  }
  char lower[8192];
  if (o->idmap_lowers) mount_idmapped_lowers(o, idmap[1], lower, sizeof lower);
  else lowers_by_fd(lower_fds, n_lower_fds, lower, sizeof lower);
  if (binds_by_mapper) receive_bind_trees(o, idmap[1]);
  if (idmap[1] >= 0) close(idmap[1]);
  char e[4096], lowers[16384];
  xsnprintf(e, sizeof e, "%s/e", o->upper);
  make_etc_layer(o, e);
  make_bind_points(o, e, lower);
  /* Above the environment's layers, below what the sandbox itself wrote (a fork's copies). */
  const char *rest = lower;
  for (unsigned long i = 0; i < o->own_lowers && rest != NULL; i++) {
    const char *c = strchr(rest, ':');
    if (c == NULL && i + 1 < o->own_lowers) usage("--own-lowers is more than the lower dirs");
    rest = c == NULL ? NULL : c + 1;
  }
  if (rest == NULL) xsnprintf(lowers, sizeof lowers, "%s:%s", lower, e);
  else xsnprintf(lowers, sizeof lowers, "%.*s%s:%s", (int)(rest - lower), lower, e, rest);
  xsnprintf(data, sizeof data, "lowerdir=%s,upperdir=%s,workdir=%s,userxattr%s", lowers, u, w, o->volatile_upper ? ",volatile" : "");
  mount_or_die("msb-root", o->merged, "overlay", 0, data);
  /* the overlay holds the lower dirs now */
  for (int i = 0; i < n_lower_fds; i++) close(lower_fds[i]);
  int rootfd = open(o->merged, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (rootfd < 0) die("open %s", o->merged);
  claim_mount_points(rootfd);
  attach_binds(o, rootfd);
  close(rootfd);
  if (unshare(CLONE_NEWPID) < 0) die("unshare a pid namespace");
}

static int holder_main(struct opts *o) {
  if (o->info_fd < 0) usage("holder needs --info-fd");
  holder_setup(o);
  int alive[2];
  if (pipe2(alive, O_CLOEXEC) < 0) die("pipe");
  pid_t init = fork_or_die();
  if (init == 0) {
    close(alive[1]);
    init_main(o, alive[0]);
  }
  close(alive[0]);
  char info[64];
  int n = snprintf(info, sizeof info, "{\"child-pid\": %d}\n", init);
  write_all(o->info_fd, info, (size_t)n);
  close(o->info_fd);
  /* The holder keeps the namespaces for the runtime; it has nothing to read or say. */
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull >= 0) {
    dup2(devnull, 0);
    dup2(devnull, 1);
    close(devnull);
  }
  int st = wait_status(init);
  return st < 0 ? 1 : shell_status(st);
}

/* ---- enter -------------------------------------------------------------------------------- */

static int open_ns(pid_t pid, const char *ns) {
  char p[64];
  xsnprintf(p, sizeof p, "/proc/%d/ns/%s", pid, ns);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open %s (is the sandbox alive?)", p);
  return fd;
}

static void setns_or_die(int fd, int type, const char *what) {
  if (setns(fd, type) < 0) die("join the sandbox's %s namespace", what);
  close(fd);
}

/*
 * The command itself (pid 2 of the nested pid namespace, or of a one-shot sandbox). Reports setup
 * failures on `errfd`. `gate_fd` >= 0: a pipe whose EOF it waits for right before the exec.
 */
static void command_main(const struct opts *o, int errfd, int pty_slave, int gate_fd) {
  report_fd = errfd;
  setsid();
  if (pty_slave >= 0) {
    for (int fd = 0; fd < 3; fd++)
      if (dup2(pty_slave, fd) < 0) die("dup2 the terminal");
    if (pty_slave > 2) close(pty_slave);
    if (ioctl(0, TIOCSCTTY, 0) < 0) die("make the terminal the controlling one");
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  if (clearenv() != 0) die("clearenv");
  for (int i = 0; i < o->n_env; i++)
    if (putenv((char *)o->env[i]) != 0) die("setenv");
  if (o->workdir != NULL && chdir(o->workdir) < 0) {
    dprintf(errfd, "minisandbox: cannot enter workdir %s: %s", o->workdir, strerror(errno));
    _exit(125);
  }
  if (o->has_user && (o->user_uid != 0 || o->user_gid != 0)) {
    restrict_bounding_set(0);
    if (setgroups(0, NULL) < 0 || setresgid(o->user_gid, o->user_gid, o->user_gid) < 0 || setresuid(o->user_uid, o->user_uid, o->user_uid) < 0) die("switch to user %u:%u", o->user_uid, o->user_gid);
    uid_t ru, eu, su;
    gid_t rg, eg, sg;
    /* the switch is checked, not assumed: the command never runs as anyone but the user asked for */
    if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0 || ru != o->user_uid || eu != o->user_uid || su != o->user_uid ||
        rg != o->user_gid || eg != o->user_gid || sg != o->user_gid) {
      errno = 0;
      die("switch to user %u:%u left the ids %u:%u", o->user_uid, o->user_gid, eu, eg);
    }
    set_caps_final(0);
  } else {
    uint64_t keep = 0;
    for (int i = 0; i < o->n_caps; i++) keep |= 1ULL << cap_number(o->caps[i]);
    restrict_bounding_set(keep);
    set_caps_final(keep);
  }
  /*
   * A session keyring of its own: the one inherited from the runtime would let the command use
   * (as its possessor) whatever keys the host session holds.
   */
  if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0) die("join a new session keyring");
  install_seccomp();
  syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (gate_fd >= 0) {
    char c;
    while (read(gate_fd, &c, 1) < 0 && errno == EINTR) {
    }
  }
  execvp(o->argv[0], o->argv);
  int why = errno;
  dprintf(errfd, "minisandbox: cannot run %s: %s", o->argv[0], strerror(why));
  /* as shells say it: 127 not found, 126 found but not runnable (enter_main passes these on) */
  _exit(why == ENOENT ? 127 : 126);
}

/* As a pid 1 whose command is `cmd`: reaps every orphan until `cmd` ends, then exits with its status. */
static void __attribute__((noreturn)) reap_until(pid_t cmd) {
  for (;;) {
    int st;
    pid_t p = wait(&st);
    if (p < 0 && errno == EINTR) continue;
    if (p < 0) _exit(125);
    if (p == cmd) _exit(shell_status(st));
  }
}

/* pid 1 of the command's own pid namespace: /proc, then the command as pid 2, reaping orphans. */
static void nested_init_main(const struct opts *o, int parent_rfd, int credfd, int errfd, int pty_slave) {
  report_fd = errfd;
  die_with_parent();
  if (!parent_alive(parent_rfd)) _exit(1);
  close(parent_rfd);
  /* Tell the outer process our host pid: the kernel fills in the sender's credentials. */
  if (write(credfd, "p", 1) != 1) die("report pid");
  close(credfd);
  mount_or_die("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  pid_t cmd = fork_or_die();
  if (cmd == 0) command_main(o, errfd, pty_slave, -1);
  close(errfd);
  if (pty_slave >= 0) close(pty_slave);
  reap_until(cmd);
}

static volatile sig_atomic_t window_changed;
static void on_sigwinch(int sig) {
  (void)sig;
  window_changed = 1;
}

/*
 * Copies our stdin to the sandbox terminal and its output to our stdout until every holder of the
 * terminal's other end is gone (the command's pid namespace ended), with our terminal in raw mode
 * so that keys like Ctrl-C reach the sandbox's line discipline instead of signalling us.
 */
static void relay_terminal(int master, int follow_size) {
  struct termios saved;
  int raw = isatty(0) && tcgetattr(0, &saved) == 0;
  if (raw) {
    struct termios t = saved;
    cfmakeraw(&t);
    tcsetattr(0, TCSANOW, &t);
  }
  /* a size given on the command line stays; else the terminal follows ours */
  if (follow_size) {
    struct sigaction sa = {0};
    sa.sa_handler = on_sigwinch;
    sigaction(SIGWINCH, &sa, NULL);
  }
  window_changed = follow_size;
  int in_open = 1;
  char buf[16384];
  for (;;) {
    if (window_changed) {
      window_changed = 0;
      struct winsize ws;
      if (ioctl(0, TIOCGWINSZ, &ws) == 0) ioctl(master, TIOCSWINSZ, &ws);
    }
    struct pollfd p[2] = {{master, POLLIN, 0}, {in_open ? 0 : -1, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[0].revents != 0) {
      ssize_t n = read(master, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break; /* EIO: nothing holds the terminal any more */
      write_all(1, buf, (size_t)n);
    }
    if (p[1].revents != 0) {
      ssize_t n = read(0, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) write_all(master, buf, (size_t)n);
      else {
        /* our input ended (a pipe, not a terminal): say end-of-file the terminal's way */
        in_open = 0;
        struct termios t;
        char eof = tcgetattr(master, &t) == 0 ? (char)t.c_cc[VEOF] : 4;
        write_all(master, &eof, 1);
      }
    }
  }
  if (raw) tcsetattr(0, TCSANOW, &saved);
  close(master);
}

static void report_child_pid(int status_fd, pid_t pid) {
  char info[64];
  int n = snprintf(info, sizeof info, "{\"child-pid\": %d}\n", pid);
  write_all(status_fd, info, (size_t)n);
}

/*
 * Once the command's chain ended (wait status `st`): a setup failure written on `errfd` goes to
 * stderr, without an exit-code, and our status says which (127 its program was not found, 126 it
 * could not be run, 125 anything else); else {"exit-code": N} goes to the status fd.
 */
static int report_end(int st, int errfd, int status_fd) {
  char msgbuf[1024];
  ssize_t n = read(errfd, msgbuf, sizeof msgbuf - 1);
  if (n > 0) {
    msgbuf[n] = '\0';
    fprintf(stderr, "%s\n", msgbuf);
    int failed = st < 0 ? 125 : shell_status(st);
    return failed == 126 || failed == 127 ? failed : 125;
  }
  int code = st < 0 ? 125 : shell_status(st);
  char info[64];
  int len = snprintf(info, sizeof info, "{\"exit-code\": %d}\n", code);
  write_all(status_fd, info, (size_t)len);
  return code;
}

static int enter_main(struct opts *o) {
  if (o->holder <= 0 || o->init <= 0 || o->pidns_fd < 0 || o->status_fd < 0 || o->argv == NULL || o->argv[0] == NULL) usage("enter needs --holder --init --pidns-fd --status-fd -- ARGV");
  join_cgroups_and_limit(o);
  int userfd = open_ns(o->holder, "user");
  int mntfd = open_ns(o->init, "mnt");
  int ipcfd = open_ns(o->init, "ipc");
  int utsfd = open_ns(o->init, "uts");
  int netfd = o->net_none ? open_ns(o->init, "net") : -1;
  setns_or_die(userfd, CLONE_NEWUSER, "user");
  become_ns_root(0);
  /* Privileged inside the sandbox until the exec: nothing there may ptrace or read us. */
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  setns_or_die(mntfd, CLONE_NEWNS, "mount");
  setns_or_die(ipcfd, CLONE_NEWIPC, "ipc");
  setns_or_die(utsfd, CLONE_NEWUTS, "uts");
  if (netfd >= 0) setns_or_die(netfd, CLONE_NEWNET, "network");
  setns_or_die(o->pidns_fd, CLONE_NEWPID, "pid");
  /* A private copy of the sandbox's mounts, so this command's /proc shows its own processes only. */
  if (unshare(CLONE_NEWNS) < 0) die("unshare a mount namespace");
  int pty_master = -1, pty_slave = -1;
  if (o->pty) {
    /* from the sandbox's own devpts: the command sees /dev/pts/N */
    pty_master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (pty_master < 0 || unlockpt(pty_master) < 0) die("open a terminal in the sandbox");
    pty_slave = ioctl(pty_master, TIOCGPTPEER, O_RDWR | O_NOCTTY);
    if (pty_slave < 0) die("open the terminal's peer");
    if (o->pty_rows > 0 && o->pty_cols > 0) {
      struct winsize ws = {.ws_row = (unsigned short)o->pty_rows, .ws_col = (unsigned short)o->pty_cols};
      if (ioctl(pty_master, TIOCSWINSZ, &ws) < 0) die("set the terminal's size");
    }
    if (o->pty_no_echo) {
      struct termios t;
      if (tcgetattr(pty_slave, &t) < 0) die("read the terminal's modes");
      t.c_lflag &= ~(tcflag_t)ECHO;
      if (tcsetattr(pty_slave, TCSANOW, &t) < 0) die("turn the terminal's echo off");
    }
  }
  int cred[2], err[2];
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, cred) < 0) die("socketpair");
  int one = 1;
  if (setsockopt(cred[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0) die("SO_PASSCRED");
  if (pipe2(err, O_CLOEXEC) < 0) die("pipe");
  pid_t outer = fork_or_die();
  if (outer == 0) {
    /* In the sandbox's pid namespace, but not its init: only from here can a nested one be made. */
    report_fd = err[1];
    die_with_parent();
    if (getppid() != 0) _exit(1); /* our parent (outside this namespace) already died */
    close(cred[0]);
    close(err[0]);
    close(o->status_fd);
    if (pty_master >= 0) close(pty_master);
    int nested_alive[2];
    if (pipe2(nested_alive, O_CLOEXEC) < 0) die("pipe");
    if (unshare(CLONE_NEWPID) < 0) die("unshare a pid namespace");
    pid_t nested = fork_or_die();
    if (nested == 0) {
      close(nested_alive[1]);
      nested_init_main(o, nested_alive[0], cred[1], err[1], pty_slave);
    }
    close(nested_alive[0]);
    close(cred[1]);
    close(err[1]);
    if (pty_slave >= 0) close(pty_slave);
    int st = wait_status(nested);
    _exit(st < 0 ? 125 : shell_status(st));
  }
  close(cred[1]);
  close(err[1]);
  if (pty_slave >= 0) close(pty_slave);
  /* The nested pid 1's host pid, translated by the kernel into our (the host's) pid namespace. */
  char byte;
  char ctrl[CMSG_SPACE(sizeof(struct ucred))];
  struct iovec iov = {&byte, 1};
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof ctrl;
  ssize_t got;
  do got = recvmsg(cred[0], &msg, 0);
  while (got < 0 && errno == EINTR);
  if (got == 1) {
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (c != NULL && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
      struct ucred uc;
      memcpy(&uc, CMSG_DATA(c), sizeof uc);
      report_child_pid(o->status_fd, uc.pid);
    }
  }
  close(cred[0]);
  if (pty_master >= 0) relay_terminal(pty_master, o->pty_rows == 0);
  return report_end(wait_status(outer), err[0], o->status_fd);
}

/* ---- run ---------------------------------------------------------------------------------- */

/* make_workdir as the holder's init does it: as the namespace's root, no capability in effect. */
static void make_workdir_without_caps(const char *workdir) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct saved[2], none[2];
  if (syscall(SYS_capget, &hdr, saved) < 0) die("capget");
  memcpy(none, saved, sizeof none);
  none[0].effective = none[1].effective = 0;
  if (syscall(SYS_capset, &hdr, none) < 0) die("capset");
  make_workdir(workdir);
  if (syscall(SYS_capset, &hdr, saved) < 0) die("capset");
}

/*
 * pid 1 of a one-shot sandbox: set up like the holder's init, then the command as its child with
 * what enter gives a command; it reaps orphans until the command ends and then exits with its
 * status, which ends every other process of the sandbox.
 */
static void run_init_main(const struct opts *o, int parent_rfd, int errfd) {
  report_fd = errfd;
  /*
   * Out of the caller's session, and not dumpable (so not ptrace-able by the command, whose uid it
   * shares): the caller's terminal may be on our stdio, and a process of that session could push
   * input into it (TIOCSTI) or take it over.
   */
  if (setsid() < 0) die("setsid");
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  close(o->status_fd);
  init_setup(o, parent_rfd);
  make_workdir_without_caps(o->workdir);
  /* Inside the sandbox's user namespace it counts the sandbox's processes only (see holderArgs). */
  set_rlimits(o, 1);
  int go[2];
  if (pipe2(go, O_CLOEXEC) < 0) die("pipe");
  pid_t cmd = fork_or_die();
  if (cmd == 0) {
    /* Nothing of the command runs before init has given up its capabilities (it waits at the exec). */
    close(go[1]);
    command_main(o, errfd, -1, go[0]);
  }
  close(go[0]);
  /*
   * Our command line (host paths, the command's environment) would show as /proc/1/cmdline to
   * the command, which a holder's init never shows to one: the command has its own copy by now.
   */
  for (int i = 0; i < main_argc; i++) memset(main_argv[i], 0, strlen(main_argv[i]));
  restrict_bounding_set(0);
  set_caps_final(0);
  /* The command's stdio (maybe the caller's terminal) is its own: init keeps none of it. */
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; fd++) {
    if (devnull >= 0) dup2(devnull, fd);
    else close(fd);
  }
  if (devnull > 2) close(devnull);
  close(go[1]);
  reap_until(cmd);
}

static int run_main(struct opts *o) {
  if (o->status_fd < 0 || o->argv == NULL || o->argv[0] == NULL) usage("run needs --status-fd -- ARGV");
  pid_t caller = getppid();
  holder_setup(o);
  /*
   * The sandbox lives only as long as its caller (the runtime): the chain dies with us. Set after
   * the switch to the namespace's root, which clears it.
   */
  die_with_parent();
  if (getppid() != caller) _exit(1);
  int alive[2], err[2];
  if (pipe2(alive, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) die("pipe");
  pid_t init = fork_or_die();
  if (init == 0) {
    close(alive[1]);
    close(err[0]);
    run_init_main(o, alive[0], err[1]);
  }
  close(alive[0]);
  close(err[1]);
  report_child_pid(o->status_fd, init);
  return report_end(wait_status(init), err[0], o->status_fd);
}

/* ---- own-run ------------------------------------------------------------------------------ */

/* The cgroup's oom_kill count (memory.events), 0 where there is none. */
static unsigned long oom_kills(const char *file) {
  if (file == NULL) return 0;
  char buf[2048];
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  for (char *line = buf; line != NULL && *line != '\0'; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
    if (strncmp(line, "oom_kill ", 9) == 0) return strtoul(line + 9, NULL, 10);
  return 0;
}

/* Removes a cgroup, killing what is left in it: the chain's processes may take a moment to leave. */
static int remove_cgroup(const char *dir) {
  char procs[4096];
  xsnprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
  for (int attempt = 0; attempt < 100; attempt++) {
    if (rmdir(dir) == 0 || errno == ENOENT) return 1;
    if (errno != EBUSY) return 0;
    FILE *f = fopen(procs, "re");
    if (f != NULL) {
      long pid;
      while (fscanf(f, "%ld", &pid) == 1) kill((pid_t)pid, SIGKILL);
      fclose(f);
    }
    struct timespec pause = {0, attempt < 20 ? 1000000L : 20000000L};
    nanosleep(&pause, NULL);
  }
  return 0;
}

/*
 * The --cleanup-* steps in their order (the runtime's teardown: cgroups, the state file, the dirs,
 * the id range, the lease). The first that fails stops them: what is left, its state file first,
 * is the next reap's, as after an owner that was killed.
 */
static void run_cleanup(const struct opts *o) {
  for (int i = 0; i < o->n_cleanup; i++) {
    const char *path = o->cleanup[i].path;
    int ok;
    if (o->cleanup[i].op == 'c') ok = remove_cgroup(path);
    else if (o->cleanup[i].op == 'r') ok = rmdir(path) == 0 || errno == ENOENT;
    else ok = unlink(path) == 0 || errno == ENOENT;
    if (!ok) return;
  }
}

static long elapsed_ms(const struct timespec *since) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - since->tv_sec) * 1000L + (now.tv_nsec - since->tv_nsec) / 1000000L;
}

/*
 * Ctrl-Z on a one-shot run (own-run): the command is in a session of its own, out of the
 * terminal's reach, so the terminal's stop reaches only us; stopping just ourselves would leave
 * the command running, and reading the terminal against the shell. So the sandbox stops with us.
 * Its processes are those in its user namespace (it cannot make nested ones: init_setup sets
 * max_user_namespaces to 0), in whichever pid namespace; a host uid of the sandbox's range is
 * checked first, which is cheaper to read. Each is signalled through a pidfd opened before it is
 * checked, so a pid that ended and was reused meanwhile is never stopped, nor later continued.
 */
struct stopped_set {
  int *fds;
  pid_t *pids;
  size_t n, cap;
};

static int stopped_has(const struct stopped_set *s, pid_t pid) {
  for (size_t i = 0; i < s->n; i++)
    if (s->pids[i] == pid) return 1;
  return 0;
}

/* Room for one more; 0 where there is none (a process it cannot record is not stopped). */
static int stopped_reserve(struct stopped_set *s) {
  if (s->n < s->cap) return 1;
  size_t cap = s->cap == 0 ? 64 : s->cap * 2;
  int *fds = realloc(s->fds, cap * sizeof *fds);
  if (fds == NULL) return 0;
  s->fds = fds;
  pid_t *pids = realloc(s->pids, cap * sizeof *pids);
  if (pids == NULL) return 0;
  s->pids = pids;
  s->cap = cap;
  return 1;
}

/* The real uid and the state letter in /proc/PID/status; 0 when read. */
static int proc_uid_state(pid_t pid, unsigned long *uid, char *state) {
  char path[64], buf[2048];
  xsnprintf(path, sizeof path, "/proc/%d/status", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char *st = strstr(buf, "\nState:\t"), *u = strstr(buf, "\nUid:\t");
  if (st == NULL || u == NULL) return -1;
  *state = st[8];
  *uid = strtoul(u + 6, NULL, 10);
  return 0;
}

/* Whether /proc/PID/ns/user is the namespace `ns` (from a stat of another process's). */
static int in_userns(pid_t pid, const struct stat *ns) {
  char path[64];
  struct stat st;
  xsnprintf(path, sizeof path, "/proc/%d/ns/user", pid);
  return stat(path, &st) == 0 && st.st_dev == ns->st_dev && st.st_ino == ns->st_ino;
}

/*
 * Stops every process of the sandbox that is not stopped yet, pass after pass until one finds
 * none (a process forking meanwhile shows its child in the next pass; a stop lands
 * asynchronously), at most for about a second. Those it stopped are recorded: a process the
 * sandbox had stopped itself stays stopped when the sandbox continues.
 */
static void stop_sandbox(const struct opts *o, pid_t member, struct stopped_set *s) {
  char path[64];
  struct stat ns;
  xsnprintf(path, sizeof path, "/proc/%d/ns/user", member);
  if (stat(path, &ns) < 0) return; /* the sandbox is gone */
  for (int pass = 0; pass < 1000; pass++) {
    int running = 0;
    DIR *d = opendir("/proc");
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      char *end;
      long pid = strtol(e->d_name, &end, 10);
      if (*end != '\0' || pid <= 0) continue;
      int pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
      if (pfd < 0) continue;
      unsigned long uid;
      char state;
      int ours = proc_uid_state((pid_t)pid, &uid, &state) == 0 && uid >= o->uid_start && uid - o->uid_start < o->uid_count &&
                 in_userns((pid_t)pid, &ns);
      if (ours && state != 'T' && state != 't' && state != 'Z' && state != 'X') {
        /* one already recorded whose stop has not landed yet is signalled again, not recorded twice */
        int known = stopped_has(s, (pid_t)pid);
        if ((known || stopped_reserve(s)) && syscall(SYS_pidfd_send_signal, pfd, SIGSTOP, NULL, 0) == 0) {
          running = 1;
          if (!known) {
            s->fds[s->n] = pfd; /* ours now: continue_sandbox closes it */
            s->pids[s->n++] = (pid_t)pid;
            continue;
          }
        }
      }
      close(pfd);
    }
    closedir(d);
    if (!running) return;
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
}

static void continue_sandbox(struct stopped_set *s) {
  for (size_t i = 0; i < s->n; i++) {
    syscall(SYS_pidfd_send_signal, s->fds[i], SIGCONT, NULL, 0);
    close(s->fds[i]);
  }
  s->n = 0;
}

/*
 * own-run: the CLI's one-shot run, exec'd by the runtime in place of itself once the sandbox is
 * prepared (state file, lease, cgroup, dirs): a run's chain as its child, the caller's Ctrl-C,
 * Ctrl-\ (QUIT: its default, a core dump of this process, would skip the teardown), TERM or HUP
 * and the --timeout-ms deadline kill it (stopped time counts), Ctrl-Z (TSTP) stops it with us
 * until we are continued (stop_sandbox), and the end is reported as the CLI reports a
 * runOnce outcome (runner.ts classifyEnding, sandbox-commands.ts): exit status 124 timeout, 128 + N
 * ended by our signal N (130 Ctrl-C, 143 TERM), 137 OOM, 127/126/125 a command that could not
 * start, else the command's own, with
 * "warning: command ended: STATUS" on stderr where it did not end by itself. Then the cleanup
 * steps. The waiting process is this one, not a node runtime.
 */
static int own_run_main(struct opts *o) {
  if (o->argv == NULL || o->argv[0] == NULL || o->status_fd >= 0) usage("own-run needs -- ARGV (and makes its own status fd)");
  sigset_t stop, saved;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  sigaddset(&stop, SIGQUIT);
  sigaddset(&stop, SIGTSTP);
  if (sigprocmask(SIG_BLOCK, &stop, &saved) < 0) die("sigprocmask");
  int sfd = signalfd(-1, &stop, SFD_CLOEXEC);
  if (sfd < 0) die("signalfd");
  int st[2];
  if (pipe2(st, O_CLOEXEC) < 0) die("pipe");
  unsigned long oom_before = oom_kills(o->oom_events);
  struct timespec started;
  clock_gettime(CLOCK_MONOTONIC, &started);
  pid_t chain = fork_or_die();
  if (chain == 0) {
    sigprocmask(SIG_SETMASK, &saved, NULL);
    close(sfd);
    close(st[0]);
    /* out of the terminal's process group: its Ctrl-C is ours to act on (the chain dies with us) */
    if (setsid() < 0) die("setsid");
    o->status_fd = st[1];
    _exit(run_main(o));
  }
  close(st[1]);
  /* a reader of our stderr gone must not end us before the teardown */
  signal(SIGPIPE, SIG_IGN);
  char status[512];
  size_t len = 0;
  status[0] = '\0';
  pid_t init = 0;
  /* killed: the signal that ended the run (the exit status is 128 + it, as shells and docker give) */
  int timed_out = 0, killed = 0, open_ = 1;
  struct stopped_set held = {NULL, NULL, 0, 0};
  while (open_) {
    int wait = -1;
    if (o->timeout_ms > 0 && !timed_out) {
      long left = (long)o->timeout_ms - elapsed_ms(&started);
      wait = left > 0 ? (int)(left < 1000000 ? left : 1000000) : 0;
    }
    struct pollfd p[2] = {{st[0], POLLIN, 0}, {sfd, POLLIN, 0}};
    int n = poll(p, 2, wait);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (n == 0 && wait >= 0 && (long)o->timeout_ms <= elapsed_ms(&started)) timed_out = 1;
    if (p[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGTSTP) {
          /* the chain is in the sandbox's user namespace (run_main unshares it) */
          stop_sandbox(o, chain, &held);
          kill(getpid(), SIGSTOP);
          /* continued: fg, bg or any SIGCONT */
          continue_sandbox(&held);
        } else if (killed == 0) {
          killed = (int)si.ssi_signo;
        }
      }
    }
    if ((timed_out || killed) && chain > 0) {
      /* pid 1 of the sandbox takes every process in it along; the chain dies with its init */
      if (init > 0) kill(init, SIGKILL);
      kill(chain, SIGKILL);
    }
    if (p[0].revents & (POLLIN | POLLHUP)) {
      char scratch[256];
      char *into = len < sizeof status - 1 ? status + len : scratch;
      size_t room = len < sizeof status - 1 ? sizeof status - 1 - len : sizeof scratch;
      ssize_t r = read(st[0], into, room);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) open_ = 0;
      else if (into == status + len) {
        len += (size_t)r;
        status[len] = '\0';
        const char *c = strstr(status, "\"child-pid\": ");
        if (init == 0 && c != NULL) init = (pid_t)strtol(c + 13, NULL, 10);
      }
    }
  }
  int ws = wait_status(chain);
  const char *code_at = strstr(status, "\"exit-code\": ");
  const char *ended = NULL;
  char why[96] = "";
  int code;
  if (timed_out) {
    code = 124;
    ended = "timeout";
  } else if (killed) {
    code = 128 + killed;
    ended = "killed";
    snprintf(why, sizeof why, " (SIG%s)", sigabbrev_np(killed));
  } else if (code_at == NULL) {
    int failed = ws < 0 ? 125 : shell_status(ws);
    code = failed == 126 || failed == 127 ? failed : 125;
    if (code == 125) {
      ended = "infra_error";
      snprintf(why, sizeof why, " (command could not be started in the sandbox: exit %d)", failed);
    }
  } else {
    code = (int)strtol(code_at + 13, NULL, 10);
    if (code > 128 && code < 128 + 65) ended = code == 137 && oom_kills(o->oom_events) > oom_before ? "oom" : "killed";
  }
  if (ended != NULL) fprintf(stderr, "warning: command ended: %s%s\n", ended, why);
  fflush(stderr);
  run_cleanup(o);
  return code;
}

/* ---- serve -------------------------------------------------------------------------------- */

#include "sandbox-launch-serve.c"

static int userns_main(struct opts *o) {
  if (o->uid_count == 0 || o->gid_count == 0 || o->argv == NULL || o->argv[0] == NULL) usage("userns needs --uid-map, --gid-map and -- ARGV");
  o->map_self = 1;
  o->self_uid = getuid();
  o->self_gid = getgid();
  enter_user_namespace(o);
  execvp(o->argv[0], o->argv);
  die("cannot run %s", o->argv[0]);
  return 125;
}

/*
 * Whether DIR can be mounted idmapped: a child makes a user namespace, we (root) map it and try
 * an idmapped clone of DIR through it. Nothing is attached anywhere; the clone is closed.
 */
static int idmap_probe_main(struct opts *o) {
  if (o->uid_count == 0 || o->gid_count == 0 || o->argv == NULL || o->argv[0] == NULL) usage("idmap-probe needs --uid-map, --gid-map and -- DIR");
  if (geteuid() != 0) {
    printf("idmapped mounts need root (CAP_SYS_ADMIN in the initial user namespace)\n");
    return 4;
  }
  int ready[2], hold[2];
  if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(hold, O_CLOEXEC) < 0) die("pipe");
  pid_t child = fork_or_die();
  if (child == 0) {
    close(ready[0]);
    close(hold[1]);
    die_with_parent();
    if (unshare(CLONE_NEWUSER) < 0) _exit(1);
    write_all(ready[1], "x", 1);
    char c;
    while (read(hold[0], &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  char c;
  if (read(ready[0], &c, 1) != 1) {
    printf("cannot create a user namespace\n");
    return 4;
  }
  write_id_maps(child, o);
  char p[64];
  xsnprintf(p, sizeof p, "/proc/%d/ns/user", child);
  int ns = open(p, O_RDONLY | O_CLOEXEC);
  if (ns < 0) die("open %s", p);
  int t = idmapped_clone(o->argv[0], ns);
  int err = errno;
  close(hold[1]);
  wait_status(child);
  if (t < 0) {
    printf("idmapped mount of %s refused: %s\n", o->argv[0], strerror(err));
    return 4;
  }
  close(t);
  return 0;
}

int main(int argc, char **argv) {
  /* exec'd by a profiled node (exec-in-place.c), SIGPROF comes ignored; nothing of ours inherits that */
  signal(SIGPROF, SIG_DFL);
  main_argc = argc;
  main_argv = argv;
  struct opts o;
  parse_args(&o, argc, argv);
  /* a holder's namespace maps the range at 0, always: the first in-sandbox id is the range's first */
  if (o.self_first && strcmp(o.mode, "userns") != 0) usage("--self-first is for userns only");
  if (strcmp(o.mode, "holder") == 0) return holder_main(&o);
  if (strcmp(o.mode, "enter") == 0) return enter_main(&o);
  if (strcmp(o.mode, "run") == 0) return run_main(&o);
  if (strcmp(o.mode, "own-run") == 0) return own_run_main(&o);
  if (strcmp(o.mode, "serve") == 0) return serve_main();
  if (strcmp(o.mode, "userns") == 0) return userns_main(&o);
  if (strcmp(o.mode, "idmap-probe") == 0) return idmap_probe_main(&o);
  usage("mode must be holder, enter, run, own-run, serve, userns or idmap-probe");
  return 125;
}
