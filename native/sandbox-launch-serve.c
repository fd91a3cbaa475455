/*
 * serve: a long-lived parent for holders and commands, so that starting a sandbox or running a
 * command costs the runtime one message instead of one process spawn (a fork of the large runtime
 * process was the single biggest cost of both). Commands' stdio is relayed through it.
 * Included by sandbox-launch.c: it starts holder_main and enter_main in its children.
 *
 * Requests on stdin, each a decimal field count N then N fields, all NUL-terminated:
 *   S <id> <holder args...>       start a holder (the args of `holder` mode, with --info-fd 3)
 *   K <id>                        SIGKILL that holder and its init (no-op once it is gone)
 *   X <id> <0|1> <enter args...>  run a command (1: with a stdin pipe, 0: /dev/null)
 *   I <id> <len>                  then exactly len raw bytes: input for that command's stdin
 *   C <id>                        close that command's stdin once its input is written
 * Events on stdout, one line each (an O line is followed by its raw bytes):
 *   R <id> <holder pid> <init pid>            ready
 *   E <id> <status> <error output, one line>  the holder failed before it was ready
 *   X <id> <status>                           a ready holder exited (its sandbox is gone)
 *   P <id> <pid>                              a command's enter process was started
 *   O <id> <1|2|3> <len>                      output: stdout, stderr or the status fd
 *   W <id> <len>                              len bytes of its input were written (or dropped)
 *   D <id> <exit code or -1> <signal or 0>    the command's enter process exited
 *   Z <id>                                    ... and all its output has been relayed
 * On EOF of stdin the server exits, and every holder and command with it (PR_SET_PDEATHSIG).
 *
 * One server holds every sandbox of a runtime, so no request may end it or grow it without bound:
 *   - An id is 1 to 64 of [A-Za-z0-9._-] (it goes into event lines).
 *   - A record is at most ARG_MAX + 1 MiB bytes and ARG_MAX / 4 + 4096 fields, ARG_MAX being the
 *     kernel's room for one exec's strings here (exec_strings_limit), which every command
 *     inherits: each string a command's exec gets costs the kernel at least what it costs the
 *     record (its NUL, and an 8-byte pointer there against a 6-byte --env here) and is at most two
 *     fields, so a command the kernel could run fits, with its options (a few KiB) to spare. What
 *     bounds a request's argv and environment is that limit, never a count of ours.
 *   - An I payload is at most 1 MiB, and a command's input not yet written to it at most 1 MiB:
 *     the runtime sends no more than a window of input ahead of the W events.
 * A request that breaks these, or that cannot be carried out (no memory, no fds, no fork), is
 * answered for its id as its own failure and nothing else: an S with E (status 125), an X with its
 * stderr saying why, then D (125) and Z; an I beyond the window cuts that command's stdin. One
 * that cannot be answered (an id that is not one, an unknown verb, a header that is not a count,
 * an id already in use) is dropped and counted on stderr. Parsing stays in step across all of it:
 * a record too large to keep is skipped field by field as it arrives, never held.
 */

#define SERVE_ID_MAX 64
#define SERVE_INPUT_MAX (1 << 20)
#define SERVE_PENDING_INPUT_MAX (1 << 20)
#define SERVE_READ_CHUNK 65536
/* Reads of requests per turn of the loop: a flood of them still lets output and exits through. */
#define SERVE_READS_PER_TURN 16
/* Longest field count header: digits of any count we take, and its NUL. */
#define SERVE_HEADER_MAX 12

/*
 * The kernel's room for one exec's argument and environment strings (fs/exec.c,
 * bprm_stack_limits): a quarter of the RLIMIT_STACK soft limit, at most three quarters of _STK_LIM
 * (6 MiB), at least ARG_MAX (32 pages, 128 KiB); the strings' pointers count against it too. The
 * same formula as src/sandbox/arg-max.ts, for the same limit: the runtime's, which we inherit.
 */
static size_t exec_strings_limit(void) {
  size_t limit = (size_t)6 << 20;
  struct rlimit r;
  if (getrlimit(RLIMIT_STACK, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur / 4 < limit) limit = (size_t)(r.rlim_cur / 4);
  if (limit < ((size_t)128 << 10)) limit = (size_t)128 << 10;
  return limit;
}

struct job {
  char id[SERVE_ID_MAX + 1];
  pid_t pid, init;
  int ready_fd, info_fd, err_fd, life_fd;
  char ready[16], info[64], err[2048];
  size_t ready_len, info_len, err_len;
  int reported;
};

/* A command run through `enter`, its stdio relayed by the server. */
struct xjob {
  char id[SERVE_ID_MAX + 1];
  pid_t pid;
  int in_fd;
  int out_fds[3]; /* stdout, stderr, status */
  char *inbuf;
  size_t in_len, in_off;
  int close_stdin;
  int exited, status;
};

/* What arrives on stdin, parsed as it comes: at most one record is ever held. */
struct reader {
  char *buf;
  size_t len, cap;
  /* the record that starts at buf[0]: its field count (0: none yet), header size, fields found, bytes scanned */
  long count, found;
  size_t header, scanned;
  /* discarding up to the next NUL: a header too long to be one */
  int skipping;
  /* fields still to discard of a record too large to keep, and what to answer for it */
  long discard;
  char discard_verb[2], discard_id[SERVE_ID_MAX + 1];
  unsigned long malformed;
};

struct server {
  pid_t self;
  size_t max_record;
  long max_fields;
  struct job *jobs;
  size_t njobs;
  struct xjob *xjobs;
  size_t nx;
  struct reader in;
};

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static int high_dup(int fd) {
  int d = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (d < 0) die("dup");
  return d;
}

static void close_pipes(int (*p)[2], int n) {
  for (int i = 0; i < n; i++) {
    close(p[i][0]);
    close(p[i][1]);
  }
}

/* In a child of the server: the signal state a fresh process has, and death with the server. */
static void served_child_setup(pid_t server) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  die_with_parent();
  if (getppid() != server) _exit(1);
}

/*
 * In a served child, first: closes every fd from 3 up but the `n` in `keep` (its own pipes), the
 * server's others, so that there is room to put these in place even where the server had used up
 * its fds (a new one then fails with EMFILE).
 */
static void keep_only_fds(int *keep, int n) {
  for (int i = 1; i < n; i++)
    for (int k = i; k > 0 && keep[k - 1] > keep[k]; k--) {
      int t = keep[k];
      keep[k] = keep[k - 1];
      keep[k - 1] = t;
    }
  unsigned lo = 3;
  for (int i = 0; i < n; i++) {
    if (keep[i] < (int)lo) continue;
    if (keep[i] > (int)lo) syscall(SYS_close_range, lo, (unsigned)keep[i] - 1, 0);
    lo = (unsigned)keep[i] + 1;
  }
  syscall(SYS_close_range, lo, ~0U, 0);
}

/* In a served child: `mode` and the request's arguments as a command line of ours, parsed. */
static void served_args(struct opts *o, const char *mode, int nargs, char **args) {
  char **argv = xcalloc((size_t)nargs + 3, sizeof *argv);
  argv[0] = (char *)prog;
  argv[1] = (char *)mode;
  for (int n = 0; n < nargs; n++) argv[n + 2] = args[n];
  parse_args(o, nargs + 2, argv);
}

static void emit(const char *fmt, ...) {
  char line[4096];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  write_all(1, line, (size_t)n);
}

static void emit_frame(const char *id, int stream, const char *data, size_t len) {
  char head[128];
  int n = snprintf(head, sizeof head, "O %s %d %zu\n", id, stream, len);
  write_all(1, head, (size_t)n);
  write_all(1, data, len);
}

/* Starts a holder for a request: 0, or -1 with errno set and nothing left behind. */
static int start_holder(struct job *j, int nargs, char **args, pid_t server) {
  int p[4][2]; /* life, ready, info, err */
  int made = 0;
  while (made < 4 && pipe2(p[made], O_CLOEXEC) == 0) made++;
  pid_t pid = made < 4 ? -1 : fork();
  if (pid < 0) {
    int e = errno;
    close_pipes(p, made);
    errno = e;
    return -1;
  }
  if (pid == 0) {
    served_child_setup(server);
    int keep[4] = {p[0][0], p[1][1], p[3][1], p[2][1]};
    keep_only_fds(keep, 4);
    int fds[4] = {high_dup(p[0][0]), high_dup(p[1][1]), high_dup(p[3][1]), high_dup(p[2][1])};
    for (int i = 0; i < 4; i++)
      if (dup2(fds[i], i) < 0) die("dup2");
    syscall(SYS_close_range, 4, ~0U, 0);
    struct opts o;
    served_args(&o, "holder", nargs, args);
    _exit(holder_main(&o));
  }
  close(p[0][0]);
  close(p[1][1]);
  close(p[2][1]);
  close(p[3][1]);
  j->pid = pid;
  j->life_fd = p[0][1];
  j->ready_fd = p[1][0];
  j->info_fd = p[2][0];
  j->err_fd = p[3][0];
  fcntl(j->ready_fd, F_SETFL, O_NONBLOCK);
  fcntl(j->info_fd, F_SETFL, O_NONBLOCK);
  fcntl(j->err_fd, F_SETFL, O_NONBLOCK);
  return 0;
}

/* Starts a request's command: 0, or -1 with errno set and nothing left behind. */
static int start_exec(struct xjob *j, int want_stdin, int nargs, char **args, pid_t server) {
  int p[4][2]; /* stdout, stderr, status, stdin */
  int want = want_stdin ? 4 : 3, made = 0;
  while (made < want && pipe2(p[made], O_CLOEXEC) == 0) made++;
  pid_t pid = made < want ? -1 : fork();
  if (pid < 0) {
    int e = errno;
    close_pipes(p, made);
    errno = e;
    return -1;
  }
  if (pid == 0) {
    served_child_setup(server);
    int keep[4] = {p[0][1], p[1][1], p[2][1], want_stdin ? p[3][0] : p[0][1]};
    keep_only_fds(keep, 4);
    int stdin_fd = want_stdin ? p[3][0] : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (stdin_fd < 0) die("open /dev/null");
    int fds[4] = {high_dup(stdin_fd), high_dup(p[0][1]), high_dup(p[1][1]), high_dup(p[2][1])};
    for (int i = 0; i < 4; i++)
      if (dup2(fds[i], i) < 0) die("dup2");
    syscall(SYS_close_range, 4, ~0U, 0);
    /* From here on the stdio is the command's: bad arguments, or a sandbox that is gone, show on its stderr. */
    struct opts o;
    served_args(&o, "enter", nargs, args);
    int pidns = o.init > 0 ? open_ns(o.init, "pid") : -1;
    if (pidns >= 0 && pidns != 4) {
      if (dup2(pidns, 4) < 0) die("dup2");
      close(pidns);
    }
    o.status_fd = 3;
    o.pidns_fd = pidns >= 0 ? 4 : -1;
    _exit(enter_main(&o));
  }
  for (int k = 0; k < 3; k++) {
    close(p[k][1]);
    j->out_fds[k] = p[k][0];
    fcntl(j->out_fds[k], F_SETFL, O_NONBLOCK);
  }
  j->in_fd = -1;
  if (want_stdin) {
    close(p[3][0]);
    j->in_fd = p[3][1];
    fcntl(j->in_fd, F_SETFL, O_NONBLOCK);
  }
  j->pid = pid;
  return 0;
}

/* Appends what is readable on *fd to buf (dropping what does not fit); closes *fd at EOF. */
static void drain(int *fd, char *buf, size_t cap, size_t *len) {
  char tmp[1024];
  for (;;) {
    ssize_t n = read(*fd, tmp, sizeof tmp);
    if (n > 0) {
      size_t room = cap - 1 - *len;
      size_t take = (size_t)n < room ? (size_t)n : room;
      memcpy(buf + *len, tmp, take);
      *len += take;
      buf[*len] = '\0';
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) close_fd(fd);
    return;
  }
}

static void check_ready(struct job *j) {
  if (j->reported || j->init > 0) return;
  char *p = strstr(j->info, "\"child-pid\": ");
  if (p == NULL || strchr(j->ready, '\n') == NULL) return;
  j->init = (pid_t)atoi(p + 13);
  j->reported = 1;
  emit("R %s %d %d", j->id, j->pid, j->init);
}

/* Relays what is readable on one of the job's output pipes; closes it at EOF. */
static void relay(struct xjob *j, int k) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(j->out_fds[k], buf, sizeof buf);
    if (n > 0) {
      emit_frame(j->id, k + 1, buf, (size_t)n);
      if ((size_t)n < sizeof buf) return;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) close_fd(&j->out_fds[k]);
    return;
  }
}

/*
 * Writes buffered input to the command's stdin as far as the pipe takes it, and says how much
 * left the buffer (W): written, or dropped once its stdin is closed (the command closed it).
 */
static void feed(struct xjob *j) {
  size_t done = 0;
  while (j->in_fd >= 0 && j->in_off < j->in_len) {
    ssize_t n = write(j->in_fd, j->inbuf + j->in_off, j->in_len - j->in_off);
    if (n > 0) {
      j->in_off += (size_t)n;
      done += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    close_fd(&j->in_fd); /* EPIPE: the command closed its stdin */
  }
  if (j->in_fd < 0 && j->in_off < j->in_len) {
    done += j->in_len - j->in_off;
    j->in_off = j->in_len;
  }
  if (j->in_off == j->in_len) {
    j->in_off = j->in_len = 0;
    if (j->close_stdin) close_fd(&j->in_fd);
  }
  if (done > 0) emit("W %s %zu", j->id, done);
}

static int xjob_closed(const struct xjob *j) {
  return j->exited && j->out_fds[0] < 0 && j->out_fds[1] < 0 && j->out_fds[2] < 0;
}

/* ---- serve: requests ---------------------------------------------------------------------- */

static void note_malformed(struct reader *r, const char *what) {
  r->malformed++;
  if (r->malformed <= 16 || r->malformed % 4096 == 0) fprintf(stderr, "%s: serve: dropped a request: %s (%lu so far)\n", prog, what, r->malformed);
}

static int valid_id(const char *id) {
  size_t n = strlen(id);
  if (n == 0 || n > SERVE_ID_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = id[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) return 0;
  }
  return 1;
}

/* A decimal number of at most SERVE_HEADER_MAX - 1 digits and nothing else, or -1. */
static long parse_decimal(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= SERVE_HEADER_MAX) return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

/* The answer to a request that was not carried out, for its id: its own failure. */
static void refuse(const char *verb, const char *id, const char *fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (strcmp(verb, "S") == 0) emit("E %s 125 %s: request refused: %s", id, prog, why);
  else if (strcmp(verb, "X") == 0) {
    char msg[640];
    int n = snprintf(msg, sizeof msg, "%s: request refused: %s\n", prog, why);
    emit_frame(id, 2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
    emit("D %s 125 0", id);
    emit("Z %s", id);
  } else fprintf(stderr, "%s: serve: %s %s refused: %s\n", prog, verb, id, why);
}

static int id_in_use(const struct server *sv, const char *id) {
  for (size_t i = 0; i < sv->njobs; i++)
    if (strcmp(sv->jobs[i].id, id) == 0) return 1;
  for (size_t i = 0; i < sv->nx; i++)
    if (strcmp(sv->xjobs[i].id, id) == 0) return 1;
  return 0;
}

static struct xjob *xjob_of(struct server *sv, const char *id) {
  for (size_t i = 0; i < sv->nx; i++)
    if (strcmp(sv->xjobs[i].id, id) == 0) return &sv->xjobs[i];
  return NULL;
}

static void request_start(struct server *sv, const char *id, int nargs, char **args) {
  struct job *jobs = realloc(sv->jobs, (sv->njobs + 1) * sizeof *jobs);
  if (jobs == NULL) {
    refuse("S", id, "out of memory");
    return;
  }
  sv->jobs = jobs;
  struct job *j = &jobs[sv->njobs];
  memset(j, 0, sizeof *j);
  strcpy(j->id, id);
  if (start_holder(j, nargs, args, sv->self) < 0) refuse("S", id, "cannot start a holder: %s", strerror(errno));
  else sv->njobs++;
}

static void request_exec(struct server *sv, const char *id, const char *stdin_flag, int nargs, char **args) {
  if (strcmp(stdin_flag, "0") != 0 && strcmp(stdin_flag, "1") != 0) {
    refuse("X", id, "the stdin field is 0 or 1");
    return;
  }
  struct xjob *xjobs = realloc(sv->xjobs, (sv->nx + 1) * sizeof *xjobs);
  if (xjobs == NULL) {
    refuse("X", id, "out of memory");
    return;
  }
  sv->xjobs = xjobs;
  struct xjob *x = &xjobs[sv->nx];
  memset(x, 0, sizeof *x);
  strcpy(x->id, id);
  if (start_exec(x, stdin_flag[0] == '1', nargs, args, sv->self) < 0) {
    refuse("X", id, "cannot start the command: %s", strerror(errno));
    return;
  }
  sv->nx++;
  emit("P %s %d", x->id, x->pid);
}

/* Input for a command: buffered for feed, within the window; beyond it, its stdin is cut. */
static void request_input(struct server *sv, const char *id, const char *data, size_t len) {
  struct xjob *x = xjob_of(sv, id);
  if (x == NULL) return; /* it ended meanwhile: the runtime no longer waits for an answer */
  size_t pending = x->in_len - x->in_off;
  char *nb = NULL;
  if (x->in_fd >= 0 && pending + len <= SERVE_PENDING_INPUT_MAX) {
    if (x->in_off > 0) {
      memmove(x->inbuf, x->inbuf + x->in_off, pending);
      x->in_len = pending;
      x->in_off = 0;
    }
    nb = realloc(x->inbuf, x->in_len + len + 1);
  }
  if (nb == NULL) {
    if (x->in_fd >= 0) refuse("I", id, "input beyond %d bytes ahead of the command, or no memory: its stdin is closed", SERVE_PENDING_INPUT_MAX);
    close_fd(&x->in_fd);
    feed(x); /* says the buffered input was dropped */
    if (len > 0) emit("W %s %zu", id, len);
    return;
  }
  x->inbuf = nb;
  memcpy(x->inbuf + x->in_len, data, len);
  x->in_len += len;
  feed(x);
}

static void request_kill(struct server *sv, const char *id) {
  for (size_t i = 0; i < sv->njobs; i++) {
    if (strcmp(sv->jobs[i].id, id) != 0) continue;
    if (sv->jobs[i].init > 0) kill(sv->jobs[i].init, SIGKILL);
    kill(sv->jobs[i].pid, SIGKILL);
  }
}

/* One complete record: `count` fields (and, for I, its payload). */
static void handle_request(struct server *sv, long count, char **f, const char *data, size_t len) {
  const char *verb = f[0], *id = f[1];
  int is_s = strcmp(verb, "S") == 0, is_x = strcmp(verb, "X") == 0;
  if (!valid_id(id)) note_malformed(&sv->in, "an id that is not 1 to 64 of [A-Za-z0-9._-]");
  else if ((is_s || is_x) && id_in_use(sv, id)) note_malformed(&sv->in, "an id already in use");
  else if (is_s) request_start(sv, id, (int)count - 2, &f[2]);
  else if (is_x && count < 3) refuse("X", id, "no stdin field");
  else if (is_x) request_exec(sv, id, f[2], (int)count - 3, &f[3]);
  else if (strcmp(verb, "I") == 0) {
    if (count == 3 && data != NULL) request_input(sv, id, data, len);
    else note_malformed(&sv->in, "an I without a valid length");
  } else if (strcmp(verb, "C") == 0 && count == 2) {
    struct xjob *x = xjob_of(sv, id);
    if (x != NULL) {
      x->close_stdin = 1;
      feed(x);
    }
  } else if (strcmp(verb, "K") == 0 && count == 2) request_kill(sv, id);
  else note_malformed(&sv->in, "an unknown verb, or a C or K of more than an id");
}

/*
 * The record at `rec` whose fields are all in (its header and r->found fields, r->scanned bytes;
 * `avail` bytes from rec on): handled, and its size including any payload returned; 0 while an
 * I's payload is still to come.
 */
static size_t complete_request(struct server *sv, char *rec, size_t avail) {
  struct reader *r = &sv->in;
  char **f = malloc((size_t)r->count * sizeof *f);
  char *at = rec + r->header;
  if (f == NULL) {
    /* the verb and id are the first two fields */
    char *id = at + strlen(at) + 1;
    if (valid_id(id)) refuse(at, id, "out of memory");
    return r->scanned;
  }
  for (long i = 0; i < r->count; i++) {
    f[i] = at;
    at += strlen(at) + 1;
  }
  size_t size = r->scanned, len = 0;
  const char *data = NULL;
  if (strcmp(f[0], "I") == 0 && r->count == 3) {
    long n = parse_decimal(f[2]);
    if (n >= 0 && n <= SERVE_INPUT_MAX) {
      if (avail - r->scanned < (size_t)n) {
        free(f);
        return 0;
      }
      data = rec + r->scanned;
      len = (size_t)n;
      size += len;
    }
  }
  handle_request(sv, r->count, f, data, len);
  free(f);
  return size;
}

/*
 * Handles every complete record the reader holds and keeps the rest (a partial record, moved to
 * buf[0], where the next call finds it). A bad header is skipped as one field; a record past
 * max_record bytes is answered as refused and its fields are discarded as they arrive.
 */
static void parse_requests(struct server *sv) {
  struct reader *r = &sv->in;
  size_t off = 0;
  for (;;) {
    char *rec = r->buf + off;
    size_t avail = r->len - off;
    if (r->skipping) {
      char *nul = memchr(rec, '\0', avail);
      if (nul == NULL) {
        off = r->len;
        break;
      }
      off += (size_t)(nul - rec) + 1;
      r->skipping = 0;
      continue;
    }
    if (r->discard > 0) {
      char *nul;
      while (r->discard > 0 && (nul = memchr(r->buf + off, '\0', r->len - off)) != NULL) {
        off = (size_t)(nul - r->buf) + 1;
        r->discard--;
      }
      if (r->discard > 0) {
        off = r->len;
        break;
      }
      if (valid_id(r->discard_id)) refuse(r->discard_verb, r->discard_id, "a request larger than %zu bytes (the kernel's ARG_MAX for one exec, and options)", sv->max_record);
      else note_malformed(r, "a record too large, without an id");
      continue;
    }
    if (r->count == 0) {
      char *nul = memchr(rec, '\0', avail);
      if (nul == NULL) {
        if (avail >= SERVE_HEADER_MAX) {
          note_malformed(r, "a header that is not a field count");
          r->skipping = 1;
          off = r->len;
        }
        break;
      }
      long count = parse_decimal(rec);
      if (count < 2 || count > sv->max_fields) {
        note_malformed(r, count < 0 ? "a header that is not a field count" : "a field count out of range");
        off += (size_t)(nul - rec) + 1;
        continue;
      }
      r->count = count;
      r->found = 0;
      r->header = r->scanned = (size_t)(nul - rec) + 1;
    }
    size_t end = avail < sv->max_record ? avail : sv->max_record;
    char *nul;
    while (r->found < r->count && r->scanned < end && (nul = memchr(rec + r->scanned, '\0', end - r->scanned)) != NULL) {
      r->scanned = (size_t)(nul - rec) + 1;
      r->found++;
    }
    if (r->found < r->count) {
      if (avail < sv->max_record) break;
      /* too large to keep: what to answer for it, then its other fields go by unread */
      const char *verb = rec + r->header;
      const char *id = r->found >= 2 ? verb + strlen(verb) + 1 : "";
      snprintf(r->discard_verb, sizeof r->discard_verb, "%s", r->found >= 1 && strlen(verb) == 1 ? verb : "?");
      snprintf(r->discard_id, sizeof r->discard_id, "%s", strlen(id) <= SERVE_ID_MAX ? id : "");
      r->discard = r->count - r->found;
      off += r->scanned;
      r->count = 0;
      continue;
    }
    size_t size = complete_request(sv, rec, avail);
    if (size == 0) break; /* an I's payload is still on its way */
    off += size;
    r->count = 0;
  }
  memmove(r->buf, r->buf + off, r->len - off);
  r->len -= off;
}

/* Reads what stdin has (a bounded number of chunks), handling records as they complete; 0 at EOF. */
static int read_requests(struct server *sv) {
  struct reader *r = &sv->in;
  for (int turn = 0; turn < SERVE_READS_PER_TURN; turn++) {
    if (r->cap - r->len < SERVE_READ_CHUNK) {
      size_t cap = r->cap * 2 > r->len + SERVE_READ_CHUNK ? r->cap * 2 : r->len + SERVE_READ_CHUNK;
      char *nb = realloc(r->buf, cap);
      if (nb == NULL) die("out of memory for requests");
      r->buf = nb;
      r->cap = cap;
    }
    ssize_t n = read(0, r->buf + r->len, SERVE_READ_CHUNK);
    if (n == 0) return 0;
    if (n < 0) return 1; /* EAGAIN: all read */
    r->len += (size_t)n;
    parse_requests(sv);
  }
  return 1;
}

/* ---- serve: the loop ---------------------------------------------------------------------- */

static void reap_children(struct server *sv) {
  for (;;) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p <= 0) return;
    for (size_t i = 0; i < sv->nx; i++) {
      struct xjob *x = &sv->xjobs[i];
      if (x->pid != p) continue;
      x->exited = 1;
      x->status = st;
      /* Output still in flight is relayed by the loop; Z follows once every pipe is at EOF. */
      emit("D %s %d %d", x->id, WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    }
    for (size_t i = 0; i < sv->njobs; i++) {
      struct job *j = &sv->jobs[i];
      if (j->pid != p) continue;
      if (j->err_fd >= 0) drain(&j->err_fd, j->err, sizeof j->err, &j->err_len);
      if (j->info_fd >= 0) drain(&j->info_fd, j->info, sizeof j->info, &j->info_len);
      if (j->ready_fd >= 0) drain(&j->ready_fd, j->ready, sizeof j->ready, &j->ready_len);
      check_ready(j);
      if (j->reported) emit("X %s %d", j->id, shell_status(st));
      else {
        for (char *c = j->err; *c; c++)
          if (*c == '\n' || *c == '\r') *c = ' ';
        emit("E %s %d %s", j->id, shell_status(st), j->err_len > 0 ? j->err : "no error output");
      }
      close_fd(&j->ready_fd);
      close_fd(&j->info_fd);
      close_fd(&j->err_fd);
      close_fd(&j->life_fd);
      sv->jobs[i] = sv->jobs[--sv->njobs];
      break;
    }
  }
}

static int serve_main(void) {
  struct server sv;
  memset(&sv, 0, sizeof sv);
  sv.self = getpid();
  size_t arg_max = exec_strings_limit();
  sv.max_record = arg_max + ((size_t)1 << 20);
  sv.max_fields = (long)(arg_max / 4) + 4096;
  /*
   * A session of its own: a Ctrl-C or Ctrl-Z at the runtime's terminal must not stop or kill every
   * sandbox at once. It still ends with the runtime (stdin EOF), and holders with it.
   */
  setsid();
  signal(SIGPIPE, SIG_IGN);
  int sfd = child_exit_fd();
  fcntl(0, F_SETFL, O_NONBLOCK);
  struct pollfd *fds = NULL;
  size_t fds_cap = 0;
  int in_open = 1;
  /* Once the runtime is gone (EOF), exiting takes every holder with us. */
  while (in_open) {
    size_t xbase = 2 + 3 * sv.njobs;
    size_t nfds = xbase + 4 * sv.nx;
    if (nfds > fds_cap) {
      struct pollfd *nf = realloc(fds, nfds * 2 * sizeof *fds);
      if (nf == NULL) die("out of memory for poll");
      fds = nf;
      fds_cap = nfds * 2;
    }
    fds[0] = (struct pollfd){0, POLLIN, 0};
    fds[1] = (struct pollfd){sfd, POLLIN, 0};
    for (size_t i = 0; i < sv.njobs; i++) {
      fds[2 + 3 * i] = (struct pollfd){sv.jobs[i].ready_fd, POLLIN, 0};
      fds[3 + 3 * i] = (struct pollfd){sv.jobs[i].info_fd, POLLIN, 0};
      fds[4 + 3 * i] = (struct pollfd){sv.jobs[i].err_fd, POLLIN, 0};
    }
    for (size_t i = 0; i < sv.nx; i++) {
      struct xjob *x = &sv.xjobs[i];
      for (int k = 0; k < 3; k++) fds[xbase + 4 * i + k] = (struct pollfd){x->out_fds[k], POLLIN, 0};
      fds[xbase + 4 * i + 3] = (struct pollfd){x->in_off < x->in_len ? x->in_fd : -1, POLLOUT, 0};
    }
    if (poll(fds, nfds, -1) < 0 && errno != EINTR) die("poll");
    for (size_t i = 0; i < sv.njobs; i++) {
      struct job *j = &sv.jobs[i];
      if (j->ready_fd >= 0 && fds[2 + 3 * i].revents) drain(&j->ready_fd, j->ready, sizeof j->ready, &j->ready_len);
      if (j->info_fd >= 0 && fds[3 + 3 * i].revents) drain(&j->info_fd, j->info, sizeof j->info, &j->info_len);
      if (j->err_fd >= 0 && fds[4 + 3 * i].revents) drain(&j->err_fd, j->err, sizeof j->err, &j->err_len);
      check_ready(j);
    }
    for (size_t i = 0; i < sv.nx; i++) {
      for (int k = 0; k < 3; k++)
        if (sv.xjobs[i].out_fds[k] >= 0 && fds[xbase + 4 * i + k].revents) relay(&sv.xjobs[i], k);
      if (fds[xbase + 4 * i + 3].revents) feed(&sv.xjobs[i]);
    }
    int stdin_ready = fds[0].revents != 0;
    /* Exits: report, forget. */
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) > 0) {
    }
    reap_children(&sv);
    for (size_t i = 0; i < sv.nx;) {
      if (!xjob_closed(&sv.xjobs[i])) {
        i++;
        continue;
      }
      emit("Z %s", sv.xjobs[i].id);
      close_fd(&sv.xjobs[i].in_fd);
      free(sv.xjobs[i].inbuf);
      sv.xjobs[i] = sv.xjobs[--sv.nx];
    }
    if (stdin_ready) in_open = read_requests(&sv);
  }
  return 0;
}
