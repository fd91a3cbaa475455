/*
 * fsmeta: applies file metadata in bulk, read as NUL-separated records on stdin.
 *
 * Node's fs cannot set nanosecond timestamps (utimes goes through a double), create device
 * nodes or FIFOs, or set extended attributes; spawning touch/mknod/setfattr per file costs
 * milliseconds each. One long-lived helper per lay-out makes exact round trips cheap.
 *
 * It also creates the entries of a lay-out (directories, symlinks, links, copies), so that one
 * process streams every file-system call of a lay-out while node parses the manifest in parallel
 * (two cores instead of one). Records are applied strictly in order.
 *
 * Usage: fsmeta [DIR [--pipe]]   relative paths are resolved against DIR (the tree being laid out).
 * With --pipe, records come through a pipe of its own instead of stdin: it prints the pipe's
 * write end's fd number on stdout; the caller opens /proc/<pid>/fd/<n> for writing and sends
 * an H record first, upon which the helper closes its own write end (so the caller's end of
 * stream is its end of input). Node gives a child's stdin as a socket, whose small kernel
 * buffer made node and the helper take turns instead of working at once (measured); a pipe
 * holds up to 4 MiB here.
 * Records (fields NUL-terminated, paths are raw bytes, numbers decimal):
 *   H path                         handshake of --pipe (path ignored)
 *   O path uid gid                 lchown
 *   M path mode                    chmod (octal digits)
 *   T path sec nsec                utimensat, atime = mtime, never follows symlinks
 *   X path name hexvalue           lsetxattr
 *   N path type mode major minor   mknod (type c|b|p)
 *   D path mode                    mkdir (octal; fails if it exists)
 *   S path target                  symlink
 *   L path src                     link src to path
 *   C path src                     copy src's content into a new file path (mode 0600)
 *   E path                         create an empty file (mode 0600)
 *   W path length <bytes>          create a file (mode 0600) holding the `length` raw bytes that
 *                                  follow the field (verified objects the fetch hands over)
 *   P path src pool                link src to path, then publish src as pool: rename without
 *                                  replacing (a racing publisher's inode wins; ours is dropped)
 *   A path length <bytes>          append the bytes to path, creating it (mode 0600) if needed:
 *                                  a large object arriving piece by piece
 *   R path dest                    rename path to dest (a large object once verified)
 *   F path uid gid mode sec nsec pool nx [name hexvalue]*nx length <bytes>
 *                                  a whole file in one record: create path holding the bytes,
 *                                  fchown, fchmod, fsetxattr each, futimens (in that order, as
 *                                  O M X T do), then link it as pool unless pool is empty or
 *                                  exists (a racing publisher's inode wins; ours stays in the
 *                                  tree). One open file instead of a path lookup per call: about
 *                                  half the system calls of W + O M T + P. A file owned by the
 *                                  helper's own ids is created with its mode instead of chown
 *                                  and chmod (two calls fewer: about 10% of a lay-out, measured).
 * On the first failure it prints "fsmeta: <op> <path>: <error>" to stderr and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static char *field(FILE *in) {
  static char *bufs[8];
  static size_t caps[8];
  static int next = 0;
  int slot = next++ & 7;
  ssize_t n = getdelim(&bufs[slot], &caps[slot], '\0', in);
  if (n <= 0) return NULL;
  return bufs[slot];
}

/* A field inside a record: a record cut short is the runtime's bug, reported as such. */
static char *arg(FILE *in) {
  char *f = field(in);
  if (f == NULL) {
    fprintf(stderr, "fsmeta: truncated record\n");
    exit(1);
  }
  return f;
}

static void fail(const char *op, const char *path) {
  fprintf(stderr, "fsmeta: %s %s: %s\n", op, path, strerror(errno));
  exit(1);
}

static int copy_file(const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return -1;
  int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) { int e = errno; close(in); errno = e; return -1; }
  for (;;) {
    ssize_t n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
    if (n == 0) break;
    if (n > 0) continue;
    if (errno != EXDEV && errno != ENOSYS && errno != EOPNOTSUPP && errno != EINVAL) goto fail;
    /* no in-kernel copy here: plain read/write from where copy_file_range left off */
    static char buf[1 << 16];
    for (;;) {
      ssize_t r = read(in, buf, sizeof buf);
      if (r == 0) break;
      if (r < 0) { if (errno == EINTR) continue; goto fail; }
      for (ssize_t w = 0; w < r;) {
        ssize_t k = write(out, buf + w, (size_t)(r - w));
        if (k < 0) { if (errno == EINTR) continue; goto fail; }
        w += k;
      }
    }
    break;
  }
  close(in);
  if (close(out) != 0) return -1;
  return 0;
fail: {
    int e = errno;
    close(in);
    close(out);
    errno = e;
    return -1;
  }
}

/* Moves src to pool unless pool exists; src is gone afterwards either way. */
static int publish(const char *src, const char *pool) {
  if (renameat2(AT_FDCWD, src, AT_FDCWD, pool, RENAME_NOREPLACE) == 0) return 0;
  if (errno == EEXIST) return unlink(src);
  if (errno != EINVAL && errno != ENOSYS) return -1;
  /* a file system without RENAME_NOREPLACE: link never replaces either */
  if (link(src, pool) != 0 && errno != EEXIST) return -1;
  return unlink(src);
}

/* Reads `len` bytes of a record into a buffer reused across records. */
static char *payload(FILE *in, size_t len) {
  static char *data;
  static size_t cap;
  if (len > cap) {
    free(data);
    cap = len;
    data = malloc(cap);
    if (!data) { fprintf(stderr, "fsmeta: out of memory\n"); exit(1); }
  }
  if (len > 0 && fread(data, 1, len, in) != len) { fprintf(stderr, "fsmeta: truncated record\n"); exit(1); }
  return data;
}

static int write_all(int fd, const char *data, size_t len) {
  for (size_t w = 0; w < len;) {
    ssize_t k = write(fd, data + w, len - w);
    if (k < 0) { if (errno == EINTR) continue; return -1; }
    w += (size_t)k;
  }
  return 0;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* W and A: the record's bytes written to path, opened with `flags` (creating it, mode 0600). */
static void write_record(FILE *in, const char *path, int flags) {
  size_t len = (size_t)strtoull(arg(in), NULL, 10);
  char *data = payload(in, len);
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0600);
  if (fd < 0) fail("create", path);
  if (write_all(fd, data, len) != 0) fail("write", path);
  if (close(fd) != 0) fail("write", path);
}

/* A hex field decoded into a fresh buffer (the caller frees it). */
static unsigned char *unhex(const char *hex, size_t *len) {
  *len = strlen(hex) / 2;
  unsigned char *val = malloc(*len + 1);
  if (!val) { fprintf(stderr, "fsmeta: out of memory\n"); exit(1); }
  for (size_t i = 0; i < *len; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) { fprintf(stderr, "fsmeta: bad hex value\n"); exit(1); }
    val[i] = (unsigned char)(hi * 16 + lo);
  }
  return val;
}

/* The F record after its path: see the header. */
static void whole_file(FILE *in, const char *field_path) {
  /* field() reuses 8 buffers: this record has more fields than that after its path */
  static char *path;
  static size_t path_cap;
  size_t plen = strlen(field_path) + 1;
  if (plen > path_cap) {
    free(path);
    path_cap = plen * 2;
    path = malloc(path_cap);
    if (!path) { fprintf(stderr, "fsmeta: out of memory\n"); exit(1); }
  }
  memcpy(path, field_path, plen);
  uid_t uid = (uid_t)strtoul(arg(in), NULL, 10);
  gid_t gid = (gid_t)strtoul(arg(in), NULL, 10);
  mode_t mode = (mode_t)strtoul(arg(in), NULL, 8);
  struct timespec ts[2];
  ts[0].tv_sec = ts[1].tv_sec = (time_t)strtoll(arg(in), NULL, 10);
  ts[0].tv_nsec = ts[1].tv_nsec = strtol(arg(in), NULL, 10);
  char *pool = strdup(arg(in));
  long nx = strtol(arg(in), NULL, 10);
  /* Owned by this process already (the usual root-owned file, or ids kept): created with its
     mode, under umask 0, and neither chown nor chmod is needed. The tree is private (0700)
     until its directories get their modes at the end, so no one sees the file early. */
  int own = (uid == geteuid() || uid == (uid_t)-1) && (gid == getegid() || gid == (gid_t)-1);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, own ? (mode & 07777) : 0600);
  if (fd < 0) fail("create", path);
  /* xattrs come before the data in the record but are set after owner and mode, as O M X T do */
  char **names = NULL;
  unsigned char **vals = NULL;
  size_t *lens = NULL;
  if (nx > 0) {
    names = calloc((size_t)nx, sizeof *names);
    vals = calloc((size_t)nx, sizeof *vals);
    lens = calloc((size_t)nx, sizeof *lens);
    if (!names || !vals || !lens) { fprintf(stderr, "fsmeta: out of memory\n"); exit(1); }
    for (long i = 0; i < nx; i++) {
      names[i] = strdup(arg(in));
      vals[i] = unhex(arg(in), &lens[i]);
    }
  }
  size_t len = (size_t)strtoull(arg(in), NULL, 10);
  char *data = payload(in, len);
  if (write_all(fd, data, len) != 0) fail("write", path);
  if (!own && fchown(fd, uid, gid) != 0) fail("chown", path);
  if (!own && fchmod(fd, mode) != 0) fail("chmod", path);
  for (long i = 0; i < nx; i++) {
    if (fsetxattr(fd, names[i], vals[i], lens[i], 0) != 0) fail("setxattr", path);
    free(names[i]);
    free(vals[i]);
  }
  free(names);
  free(vals);
  free(lens);
  if (futimens(fd, ts) != 0) fail("utimensat", path);
  if (close(fd) != 0) fail("write", path);
  if (pool[0] != '\0' && link(path, pool) != 0 && errno != EEXIST) fail("publish", pool);
  free(pool);
}

int main(int argc, char **argv) {
  FILE *in = stdin;
  char *op;
  if (argc > 1 && chdir(argv[1]) != 0) fail("chdir", argv[1]);
  /* modes given are exact: F creates files with theirs; everything else is chmod-ed later */
  umask(0);
  int write_end = -1;
  if (argc > 2 && strcmp(argv[2], "--pipe") == 0) {
    int p[2];
    if (pipe(p) != 0 || dup2(p[0], 0) != 0) fail("pipe", "");
    close(p[0]);
    write_end = p[1];
    printf("%d\n", write_end);
    fflush(stdout);
  }
  /* a larger pipe means fewer hand-offs between node and this process; best effort (above
     pipe-max-size only with CAP_SYS_RESOURCE) */
  if (fcntl(0, F_SETPIPE_SZ, 4 << 20) < 0) fcntl(0, F_SETPIPE_SZ, 1 << 20);
  static char inbuf[1 << 20];
  setvbuf(in, inbuf, _IOFBF, sizeof inbuf);
  while ((op = field(in)) != NULL) {
    char *path = arg(in);
    switch (op[0]) {
    case 'H':
      if (write_end >= 0) close(write_end);
      write_end = -1;
      break;
    case 'O': {
      char *u = arg(in), *g = arg(in);
      if (lchown(path, (uid_t)strtoul(u, NULL, 10), (gid_t)strtoul(g, NULL, 10)) != 0) fail("chown", path);
      break;
    }
    case 'M': {
      char *m = arg(in);
      if (chmod(path, (mode_t)strtoul(m, NULL, 8)) != 0) fail("chmod", path);
      break;
    }
    case 'T': {
      char *s = arg(in), *ns = arg(in);
      struct timespec ts[2];
      ts[0].tv_sec = ts[1].tv_sec = (time_t)strtoll(s, NULL, 10);
      ts[0].tv_nsec = ts[1].tv_nsec = strtol(ns, NULL, 10);
      if (utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) != 0) fail("utimensat", path);
      break;
    }
    case 'X': {
      char *name = arg(in);
      char *name_copy = strdup(name);
      size_t len;
      unsigned char *val = unhex(arg(in), &len);
      if (lsetxattr(path, name_copy, val, len, 0) != 0) fail("setxattr", path);
      free(val);
      free(name_copy);
      break;
    }
    case 'N': {
      char *t = arg(in), *m = arg(in), *ma = arg(in), *mi = arg(in);
      mode_t type = t[0] == 'c' ? S_IFCHR : t[0] == 'b' ? S_IFBLK : S_IFIFO;
      dev_t dev = makedev((unsigned)strtoul(ma, NULL, 10), (unsigned)strtoul(mi, NULL, 10));
      if (mknod(path, type | ((mode_t)strtoul(m, NULL, 8) & 07777), dev) != 0) fail("mknod", path);
      break;
    }
    case 'D': {
      char *m = arg(in);
      if (mkdir(path, (mode_t)strtoul(m, NULL, 8)) != 0) fail("mkdir", path);
      break;
    }
    case 'S': {
      char *target = arg(in);
      if (symlink(target, path) != 0) fail("symlink", path);
      break;
    }
    case 'L': {
      char *src = arg(in);
      if (link(src, path) != 0) fail("link", path);
      break;
    }
    case 'C': {
      char *src = arg(in);
      if (copy_file(src, path) != 0) fail("copy", path);
      break;
    }
    case 'E': {
      int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0 || close(fd) != 0) fail("create", path);
      break;
    }
    case 'W':
      write_record(in, path, O_EXCL);
      break;
    case 'A':
      write_record(in, path, O_APPEND | O_NOFOLLOW);
      break;
    case 'R': {
      char *dest = arg(in);
      if (rename(path, dest) != 0) fail("rename", path);
      break;
    }
    case 'F':
      whole_file(in, path);
      break;
    case 'P': {
      char *src = arg(in), *pool = arg(in);
      if (link(src, path) != 0) fail("link", path);
      if (publish(src, pool) != 0) fail("publish", pool);
      break;
    }
    default:
      fprintf(stderr, "fsmeta: unknown op %s\n", op);
      return 1;
    }
  }
  return 0;
}
