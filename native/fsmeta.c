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
 * Usage: fsmeta [DIR]   relative paths are resolved against DIR (the tree being laid out).
 * Records (fields NUL-terminated, paths are raw bytes, numbers decimal):
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

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

int main(int argc, char **argv) {
  FILE *in = stdin;
  char *op;
  if (argc > 1 && chdir(argv[1]) != 0) fail("chdir", argv[1]);
  /* a larger pipe means fewer hand-offs between node and this process; best effort */
  fcntl(0, F_SETPIPE_SZ, 1 << 20);
  static char inbuf[1 << 20];
  setvbuf(in, inbuf, _IOFBF, sizeof inbuf);
  while ((op = field(in)) != NULL) {
    char *path = arg(in);
    switch (op[0]) {
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
      char *hex = arg(in);
      size_t len = strlen(hex) / 2;
      unsigned char *val = malloc(len + 1);
      for (size_t i = 0; i < len; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) { fprintf(stderr, "fsmeta: bad hex value\n"); return 1; }
        val[i] = (unsigned char)(hi * 16 + lo);
      }
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
    case 'W': {
      char *l = arg(in);
      size_t len = (size_t)strtoull(l, NULL, 10);
      static char *data;
      static size_t cap;
      if (len > cap) {
        free(data);
        cap = len;
        data = malloc(cap);
        if (!data) { fprintf(stderr, "fsmeta: out of memory\n"); return 1; }
      }
      if (len > 0 && fread(data, 1, len, in) != len) { fprintf(stderr, "fsmeta: truncated record\n"); return 1; }
      int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) fail("create", path);
      for (size_t w = 0; w < len;) {
        ssize_t k = write(fd, data + w, len - w);
        if (k < 0) { if (errno == EINTR) continue; fail("write", path); }
        w += (size_t)k;
      }
      if (close(fd) != 0) fail("write", path);
      break;
    }
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
