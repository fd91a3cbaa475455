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
 * With frames built in (-DFSMETA_PACKS; see the section below):
 *   Q dir budget                   where objects that do not wait in memory go (dir/<hex[0:2]>/<hex>),
 *                                  and how many decoded bytes may wait in memory
 *   Z id rawlen n [hex offset size]*n src offset length [<bytes>]
 *                                  a pack frame holding n wanted objects (sorted by offset, each
 *                                  at offset in the decoded frame), decoded on another thread to
 *                                  exactly rawlen bytes, each object's sha256 checked: its
 *                                  compressed bytes are `length` bytes of file src at offset, or
 *                                  follow the field when src is empty. A failure prints
 *                                  "fsmeta: frame <id>: <why>" and ends the process.
 *   G path uid gid mode sec nsec pool nx [name hexvalue]*nx hex
 *                                  F with the bytes of object hex from an earlier Z (waiting for
 *                                  its decoding if needed); each object is placed once.
 *   Y manifest ...                 lay out a whole manifest on a thread of its own, while Z
 *                                  records go on arriving: see fsmeta-manifest.c
 * On the first failure it prints "fsmeta: <op> <path>: <error>" to stderr and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

/* Ends the process on a failure: from any thread (exit() racing another thread's is undefined). */
static void quit(void) {
  fflush(stderr);
  _exit(1);
}

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
    quit();
  }
  return f;
}

static void fail(const char *op, const char *path) {
  fprintf(stderr, "fsmeta: %s %s: %s\n", op, path, strerror(errno));
  quit();
}

/*
 * An attribute the file system refused names itself and its size (tab-separated, for fsmeta.ts):
 * ext4 answers one too large for its block with ENOSPC, which is not a full disk.
 */
static void fail_xattr(const char *path, const char *name, size_t len) {
  fprintf(stderr, "fsmeta: setxattr %s\t%s\t%zu: %s\n", path, name, len, strerror(errno));
  quit();
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) { fprintf(stderr, "fsmeta: out of memory\n"); quit(); }
  return p;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (!p) { fprintf(stderr, "fsmeta: out of memory\n"); quit(); }
  return p;
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
    data = xmalloc(cap);
  }
  if (len > 0 && fread(data, 1, len, in) != len) { fprintf(stderr, "fsmeta: truncated record\n"); quit(); }
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
  unsigned char *val = xmalloc(*len + 1);
  for (size_t i = 0; i < *len; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) { fprintf(stderr, "fsmeta: bad hex value\n"); quit(); }
    val[i] = (unsigned char)(hi * 16 + lo);
  }
  return val;
}

/* This process's ids (a system call each per file, asked once). */
static uid_t self_uid;
static gid_t self_gid;

/* The metadata fields of an F or G record after its path: see the header. */
struct meta {
  uid_t uid;
  gid_t gid;
  mode_t mode;
  struct timespec ts[2];
  char *pool;
  long nx;
  char **names;
  unsigned char **vals;
  size_t *lens;
  /* owned by this process already (the usual root-owned file, or ids kept): no chown needed */
  int own;
};

static void read_meta(FILE *in, struct meta *m) {
  m->uid = (uid_t)strtoul(arg(in), NULL, 10);
  m->gid = (gid_t)strtoul(arg(in), NULL, 10);
  m->mode = (mode_t)strtoul(arg(in), NULL, 8);
  m->ts[0].tv_sec = m->ts[1].tv_sec = (time_t)strtoll(arg(in), NULL, 10);
  m->ts[0].tv_nsec = m->ts[1].tv_nsec = strtol(arg(in), NULL, 10);
  m->pool = strdup(arg(in));
  m->nx = strtol(arg(in), NULL, 10);
  m->names = NULL;
  m->vals = NULL;
  m->lens = NULL;
  if (m->nx > 0) {
    m->names = xcalloc((size_t)m->nx, sizeof *m->names);
    m->vals = xcalloc((size_t)m->nx, sizeof *m->vals);
    m->lens = xcalloc((size_t)m->nx, sizeof *m->lens);
    for (long i = 0; i < m->nx; i++) {
      m->names[i] = strdup(arg(in));
      m->vals[i] = unhex(arg(in), &m->lens[i]);
    }
  }
  m->own = (m->uid == self_uid || m->uid == (uid_t)-1) && (m->gid == self_gid || m->gid == (gid_t)-1);
}

static void free_xattrs(struct meta *m) {
  for (long i = 0; i < m->nx; i++) {
    free(m->names[i]);
    free(m->vals[i]);
  }
  free(m->names);
  free(m->vals);
  free(m->lens);
  m->nx = 0;
}

static void free_meta(struct meta *m) {
  free_xattrs(m);
  free(m->pool);
}

/* Owner, mode, xattrs and times of an open file, in the order O M X T apply them. */
static void set_meta(int fd, const struct meta *m, const char *path, int chmod_needed) {
  if (!m->own && fchown(fd, m->uid, m->gid) != 0) fail("chown", path);
  if (chmod_needed && fchmod(fd, m->mode) != 0) fail("chmod", path);
  for (long i = 0; i < m->nx; i++)
    if (fsetxattr(fd, m->names[i], m->vals[i], m->lens[i], 0) != 0) fail_xattr(path, m->names[i], m->lens[i]);
  if (futimens(fd, m->ts) != 0) fail("utimensat", path);
}

#ifdef FSMETA_PACKS
static void link_later(const char *path, const char *pool);
#endif

/* Creates path holding `data`, with its metadata, and links it as the pool name (see F). */
static void create_file(const char *path, const struct meta *m, const char *data, size_t len) {
  /* Owned by this process: created with its mode, under umask 0, and neither chown nor chmod is
     needed. The tree is private (0700) until its directories get their modes at the end, so no
     one sees the file early. */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, m->own ? (m->mode & 07777) : 0600);
  if (fd < 0) fail("create", path);
  if (write_all(fd, data, len) != 0) fail("write", path);
  set_meta(fd, m, path, !m->own);
  if (close(fd) != 0) fail("write", path);
  if (m->pool[0] == '\0') return;
#ifdef FSMETA_PACKS
  link_later(path, m->pool);
#else
  if (link(path, m->pool) != 0 && errno != EEXIST) fail("publish", m->pool);
#endif
}

/* The F record after its path: see the header. */
static void whole_file(FILE *in, const char *field_path) {
  /* field() reuses 8 buffers: this record has more fields than that after its path */
  char *path = strdup(field_path);
  struct meta m;
  read_meta(in, &m);
  size_t len = (size_t)strtoull(arg(in), NULL, 10);
  create_file(path, &m, payload(in, len), len);
  free_meta(&m);
  free(path);
}

#ifdef FSMETA_PACKS
/*
 * Frames (built with -DFSMETA_PACKS, libzstd and libcrypto): a pull hands over the compressed
 * pack frames holding the objects it needs (Z records) instead of their decoded bytes. A second
 * thread decodes each one and checks the sha256 of each wanted object, while this thread goes
 * on creating files; a G record then places a verified object like F places its bytes. Decoding
 * and hashing in node cost about as much CPU as the whole lay-out here (measured), on a machine
 * whose two cores node and this helper already share.
 *
 * Memory is bounded: decoded frames wait for their G records up to the budget Q gives, frames
 * whose bytes came in records wait for decoding up to QUEUE_BUDGET compressed bytes. Past the
 * budget the decoder waits while this thread has other work; once this thread waits for it (an
 * object it needs is not decoded yet, or the queue is full), the decoder writes the objects of
 * the next frame to the spill directory instead (Q), so the two never wait for each other.
 * A frame larger than MAX_HELD_FRAME (a large object's own) is read from its file and decoded as
 * a stream straight into the spill directory.
 */
#include <pthread.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <zstd.h>
#include <openssl/evp.h>

/* Frames decoded whole in memory are at most this big (the packer's are 4 MiB). A larger frame
   (a large object's own) is decoded as a stream from its file straight into the spill directory. */
#define MAX_HELD_FRAME ((size_t)16 << 20)
#define STREAM_CHUNK ((size_t)1 << 20)
#define MAX_FRAME_OBJECTS ((size_t)1 << 20)
#define QUEUE_BUDGET ((size_t)16 << 20)
/* Buffers kept for reuse: memory touched for the first time cost more than the decoding on
   these VMs while the lay-out fills the page cache (measured). */
#define KEPT_BUFFERS 32
#define MIN_BUFFER ((size_t)(4 << 20) + (64 << 10))

enum { PENDING, READY, SPILLED };

struct frame;

/* An object of a frame sent with Z, from then until a G record places it. */
struct obj {
  unsigned char digest[32];
  struct frame *frame; /* while READY: the frame whose decoded bytes hold it */
  size_t off, size;
  int state;
  struct obj *next; /* hash chain */
};

struct frame {
  char *id; /* node's name for the frame, in error messages */
  char *src; /* a file to read the compressed bytes from (at src_off), instead of the record */
  off_t src_off;
  unsigned char *comp, *raw;
  size_t comp_cap, comp_len, raw_cap, raw_len;
  size_t nobj;
  struct obj **objs;
  size_t refs; /* READY objects still in `raw` */
  struct frame *next; /* decode queue */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* for the main thread: an object decoded (cv_ready), room in the queue of record bytes (cv_room) */
static pthread_cond_t cv_ready = PTHREAD_COND_INITIALIZER, cv_room = PTHREAD_COND_INITIALIZER;
/*
 * Frames wait in one of two queues, each with a thread: frames decoded whole in memory, and
 * frames streamed to disk (large objects' own). A large object then decodes alongside the small
 * ones instead of after them (node sends its frame first): it was the serial tail of a pull.
 */
struct fqueue {
  struct frame *head, *tail;
  pthread_cond_t cv; /* work queued, memory freed, or the main thread waits */
  pthread_t thread;
  int started;
};
static struct fqueue held_q = { NULL, NULL, PTHREAD_COND_INITIALIZER, 0, 0 }, stream_q = { NULL, NULL, PTHREAD_COND_INITIALIZER, 0, 0 };
static size_t q_bytes, held;
static int main_waits, input_done;
static struct obj **table;
static size_t table_cap, table_count;
static char *spill_dir;
/* decoded bytes of frames waiting for their G records (Q sets it) */
static size_t held_budget = (size_t)64 << 20;
static struct { unsigned char *p; size_t cap; } spare[KEPT_BUFFERS];
static int n_spare;

/*
 * Worker threads run at a lower priority than this one (nice +5, which needs no privilege):
 * the main thread creating files is the lay-out's critical path, and on two cores node, it and
 * the workers compete. Measured over paired pulls: 8% faster on a node_modules tree, no slower
 * on a 1.2 GiB one.
 */
static void yield_to_main(void) {
  id_t tid = (id_t)syscall(SYS_gettid);
  errno = 0;
  int prio = getpriority(PRIO_PROCESS, tid);
  if (errno == 0) setpriority(PRIO_PROCESS, tid, prio + 5 > 19 ? 19 : prio + 5);
}

/* A failure of the decoder ends the process at once: the pull is lost either way. */
static void frame_fail(const struct frame *f, const char *what) {
  fprintf(stderr, "fsmeta: frame %s: %s\n", f->id, what);
  quit();
}

static size_t slot(const unsigned char *d) {
  size_t h;
  memcpy(&h, d, sizeof h);
  return h & (table_cap - 1);
}

static struct obj *lookup(const unsigned char *d) {
  if (table_cap == 0) return NULL;
  for (struct obj *o = table[slot(d)]; o; o = o->next)
    if (memcmp(o->digest, d, 32) == 0) return o;
  return NULL;
}

static void insert(struct obj *o) {
  if (table_count * 2 >= table_cap) {
    size_t old_cap = table_cap;
    struct obj **old = table;
    table_cap = old_cap ? old_cap * 2 : 4096;
    table = xcalloc(table_cap, sizeof *table);
    for (size_t i = 0; i < old_cap; i++)
      for (struct obj *p = old[i], *n; p; p = n) {
        n = p->next;
        p->next = table[slot(p->digest)];
        table[slot(p->digest)] = p;
      }
    free(old);
  }
  o->next = table[slot(o->digest)];
  table[slot(o->digest)] = o;
  table_count++;
}

static void remove_obj(struct obj *o) {
  struct obj **p = &table[slot(o->digest)];
  while (*p != o) p = &(*p)->next;
  *p = o->next;
  table_count--;
}

/* Under mu. */
static unsigned char *take_buffer(size_t need, size_t *cap) {
  for (int i = 0; i < n_spare; i++) {
    if (spare[i].cap >= need) {
      unsigned char *p = spare[i].p;
      *cap = spare[i].cap;
      spare[i] = spare[--n_spare];
      return p;
    }
  }
  *cap = need > MIN_BUFFER ? need : MIN_BUFFER;
  return xmalloc(*cap);
}

/* Under mu. Only standard-size buffers are kept: one larger frame must not pin its size. */
static void give_buffer(unsigned char *p, size_t cap) {
  if (cap == MIN_BUFFER && n_spare < KEPT_BUFFERS) {
    spare[n_spare].p = p;
    spare[n_spare].cap = cap;
    n_spare++;
  } else {
    free(p);
  }
}

static int parse_digest(const char *hex, unsigned char *d) {
  if (strlen(hex) != 64) return -1;
  for (int i = 0; i < 32; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    d[i] = (unsigned char)(hi * 16 + lo);
  }
  return 0;
}

static void hex_of(const unsigned char *d, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (int k = 0; k < 32; k++) {
    out[2 * k] = digits[d[k] >> 4];
    out[2 * k + 1] = digits[d[k] & 15];
  }
  out[64] = '\0';
}

/* Where an object goes when it does not wait in memory: <spill dir>/<hex[0:2]>/<hex>. */
static void spill_path(char *out, size_t cap, const struct obj *o) {
  char hex[65];
  hex_of(o->digest, hex);
  snprintf(out, cap, "%s/%.2s/%s", spill_dir, hex, hex);
}

/* The open file of a frame's source (each thread keeps the file of its last frame open). */
static int source_fd(const struct frame *f) {
  static __thread char *open_src;
  static __thread int fd = -1;
  if (open_src == NULL || strcmp(open_src, f->src) != 0) {
    if (fd >= 0) close(fd);
    free(open_src);
    open_src = strdup(f->src);
    fd = open(f->src, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      char msg[512];
      snprintf(msg, sizeof msg, "cannot open %s: %s", f->src, strerror(errno));
      frame_fail(f, msg);
    }
  }
  return fd;
}

/* Reads `len` compressed bytes of a frame from `at` into `buf`; a short read is a truncated pack. */
static void read_source(const struct frame *f, unsigned char *buf, size_t len, off_t at) {
  int fd = source_fd(f);
  for (size_t got = 0; got < len;) {
    ssize_t n = pread(fd, buf + got, len - got, at + (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      char msg[512];
      snprintf(msg, sizeof msg, "read of %zu bytes at %lld returned %zu (truncated pack?)%s%s", len, (long long)at, got, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
      frame_fail(f, msg);
    }
    got += (size_t)n;
  }
}

static void digest_mismatch(const struct frame *f, const struct obj *o, const unsigned char *md) {
  char expected[65], actual[65], msg[512];
  hex_of(o->digest, expected);
  hex_of(md, actual);
  snprintf(msg, sizeof msg, "object %s has digest %s", expected, actual);
  frame_fail(f, msg);
}

static void decode_frame(ZSTD_DCtx *dctx, EVP_MD_CTX *ctx, const EVP_MD *sha, struct frame *f) {
  char msg[512];
  size_t r = ZSTD_decompressDCtx(dctx, f->raw, f->raw_len, f->comp, f->comp_len);
  if (ZSTD_isError(r)) {
    snprintf(msg, sizeof msg, "does not decode: %s", ZSTD_getErrorName(r));
    frame_fail(f, msg);
  }
  if (r != f->raw_len) {
    snprintf(msg, sizeof msg, "decodes to %zu bytes, stated %zu", r, f->raw_len);
    frame_fail(f, msg);
  }
  for (size_t i = 0; i < f->nobj; i++) {
    struct obj *o = f->objs[i];
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_DigestInit_ex(ctx, sha, NULL) != 1 || EVP_DigestUpdate(ctx, f->raw + o->off, o->size) != 1 || EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32)
      frame_fail(f, "sha256 failed");
    if (memcmp(md, o->digest, 32) != 0) digest_mismatch(f, o, md);
  }
}

/* A new file in the spill directory for an object (its name left in `path`, for errors). */
static int open_spill(const struct frame *f, const struct obj *o, char *path) {
  if (spill_dir == NULL) frame_fail(f, "no spill directory (Q record) for objects that do not stay in memory");
  spill_path(path, PATH_MAX, o);
  char *slash = strrchr(path, '/');
  *slash = '\0';
  if (mkdir(path, 0700) != 0 && errno != EEXIST) fail("mkdir", path);
  *slash = '/';
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) fail("create", path);
  return fd;
}

/* Where a streamed frame's decoded bytes are: the next wanted object, and its file while open. */
struct route {
  size_t pos, next;
  int fd;
  char path[PATH_MAX];
};

/* Hashes and writes the wanted objects' bytes among `n` decoded bytes, skipping the others. */
static void route_bytes(const struct frame *f, struct route *r, EVP_MD_CTX *ctx, const EVP_MD *sha, const unsigned char *p, size_t n) {
  while (r->next < f->nobj) {
    struct obj *o = f->objs[r->next];
    if (r->pos < o->off) {
      size_t skip = o->off - r->pos < n ? o->off - r->pos : n;
      r->pos += skip;
      p += skip;
      n -= skip;
      if (r->pos < o->off) return;
    }
    if (r->fd < 0) {
      r->fd = open_spill(f, o, r->path);
      if (EVP_DigestInit_ex(ctx, sha, NULL) != 1) frame_fail(f, "sha256 failed");
    }
    size_t left = o->off + o->size - r->pos;
    size_t take = left < n ? left : n;
    if (take > 0) {
      if (EVP_DigestUpdate(ctx, p, take) != 1) frame_fail(f, "sha256 failed");
      if (write_all(r->fd, (const char *)p, take) != 0) fail("write", r->path);
      r->pos += take;
      p += take;
      n -= take;
    }
    if (r->pos < o->off + o->size) return;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32) frame_fail(f, "sha256 failed");
    if (memcmp(md, o->digest, 32) != 0) digest_mismatch(f, o, md);
    if (close(r->fd) != 0) fail("write", r->path);
    r->fd = -1;
    r->next++;
  }
  r->pos += n; /* after the last wanted object */
}

/*
 * Decodes a frame too large to hold (a large object's own) from its file in pieces, writing its
 * objects to the spill directory as they stream by: memory stays a few MiB whatever its size.
 * The output is bounded by the stated length, as for frames decoded whole.
 */
static void stream_frame(ZSTD_DCtx *dctx, EVP_MD_CTX *ctx, const EVP_MD *sha, struct frame *f) {
  static __thread unsigned char *inbuf, *outbuf;
  if (inbuf == NULL) {
    inbuf = xmalloc(STREAM_CHUNK);
    outbuf = xmalloc(STREAM_CHUNK);
  }
  char msg[512];
  struct route r = { .pos = 0, .next = 0, .fd = -1 };
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
  ZSTD_inBuffer in = { inbuf, 0, 0 };
  size_t done = 0;
  for (;;) {
    if (in.pos == in.size && done < f->comp_len) {
      size_t n = f->comp_len - done < STREAM_CHUNK ? f->comp_len - done : STREAM_CHUNK;
      read_source(f, inbuf, n, f->src_off + (off_t)done);
      done += n;
      in.size = n;
      in.pos = 0;
    }
    ZSTD_outBuffer out = { outbuf, STREAM_CHUNK, 0 };
    size_t ret = ZSTD_decompressStream(dctx, &out, &in);
    if (ZSTD_isError(ret)) {
      snprintf(msg, sizeof msg, "does not decode: %s", ZSTD_getErrorName(ret));
      frame_fail(f, msg);
    }
    if (out.pos > f->raw_len - r.pos) {
      snprintf(msg, sizeof msg, "decodes to more than the stated %zu bytes", f->raw_len);
      frame_fail(f, msg);
    }
    route_bytes(f, &r, ctx, sha, outbuf, out.pos);
    if (in.pos == in.size && done == f->comp_len) {
      if (ret == 0) break; /* the last zstd frame is complete and flushed */
      /* no input left: the decoder still holds output (it filled the buffer), or wants more */
      if (out.pos < out.size) frame_fail(f, "ends inside a zstd frame (truncated)");
    }
  }
  if (r.pos != f->raw_len) {
    snprintf(msg, sizeof msg, "decodes to %zu bytes, stated %zu", r.pos, f->raw_len);
    frame_fail(f, msg);
  }
  if (r.next < f->nobj) frame_fail(f, "ended before all its objects");
}

/* Writes a decoded frame's objects to the spill directory (past the memory budget). */
static void spill_frame(struct frame *f) {
  for (size_t i = 0; i < f->nobj; i++) {
    struct obj *o = f->objs[i];
    char path[PATH_MAX];
    int fd = open_spill(f, o, path);
    if (write_all(fd, (const char *)f->raw + o->off, o->size) != 0 || close(fd) != 0) fail("write", path);
  }
}

/* Under mu: a frame none of whose objects needs its memory any more. */
static void free_frame(struct frame *f) {
  if (f->raw != NULL) give_buffer(f->raw, f->raw_cap);
  free(f->objs);
  free(f->id);
  free(f->src);
  free(f);
}

static void *decoder(void *queue) {
  struct fqueue *q = queue;
  yield_to_main();
  ZSTD_DCtx *dctx = ZSTD_createDCtx();
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
  EVP_MD *sha = EVP_MD_fetch(NULL, "SHA256", NULL);
#else
  const EVP_MD *sha = EVP_sha256();
#endif
  if (!dctx || !ctx || !sha) { fprintf(stderr, "fsmeta: cannot set up zstd or sha256\n"); quit(); }
  pthread_mutex_lock(&mu);
  for (;;) {
    while (q->head == NULL && !input_done) pthread_cond_wait(&q->cv, &mu);
    struct frame *f = q->head;
    if (f == NULL) break;
    int streamed = f->raw_len > MAX_HELD_FRAME;
    while (!streamed && held > 0 && held + f->raw_len > held_budget && !main_waits) pthread_cond_wait(&q->cv, &mu);
    q->head = f->next;
    if (q->head == NULL) q->tail = NULL;
    if (f->src == NULL) q_bytes -= f->comp_len;
    pthread_cond_signal(&cv_room);
    int spill = streamed || held + f->raw_len > held_budget;
    if (!spill) held += f->raw_len;
    if (!streamed) f->raw = take_buffer(f->raw_len, &f->raw_cap);
    if (!streamed && f->src != NULL) f->comp = take_buffer(f->comp_len, &f->comp_cap);
    pthread_mutex_unlock(&mu);

    if (streamed) {
      stream_frame(dctx, ctx, sha, f);
    } else {
      if (f->src != NULL) read_source(f, f->comp, f->comp_len, f->src_off);
      decode_frame(dctx, ctx, sha, f);
      if (spill) spill_frame(f);
    }

    pthread_mutex_lock(&mu);
    if (f->comp != NULL) give_buffer(f->comp, f->comp_cap);
    f->comp = NULL;
    for (size_t i = 0; i < f->nobj; i++) {
      f->objs[i]->state = spill ? SPILLED : READY;
      f->objs[i]->frame = spill ? NULL : f;
    }
    free(f->objs);
    f->objs = NULL;
    f->refs = spill ? 0 : f->nobj;
    if (f->refs == 0) {
      if (!spill) held -= f->raw_len;
      free_frame(f);
    }
    pthread_cond_broadcast(&cv_ready);
  }
  pthread_mutex_unlock(&mu);
  ZSTD_freeDCtx(dctx);
  EVP_MD_CTX_free(ctx);
  return NULL;
}

/* Under mu: a consumer of objects (this thread, or the lay-out's of a Y record) waits on `cv`;
   the decoder must not wait for it meanwhile. */
static void wait_main(pthread_cond_t *cv) {
  main_waits++;
  pthread_cond_signal(&held_q.cv);
  pthread_cond_wait(cv, &mu);
  main_waits--;
}

/* Z id rawlen nobj [hex offset size]*nobj src offset length [<bytes> when src is empty] */
static void read_frame(FILE *in, const char *id) {
  struct frame *f = xcalloc(1, sizeof *f);
  f->id = strdup(id);
  f->raw_len = (size_t)strtoull(arg(in), NULL, 10);
  f->nobj = (size_t)strtoull(arg(in), NULL, 10);
  if (f->raw_len == 0 || f->nobj == 0 || f->nobj > MAX_FRAME_OBJECTS) frame_fail(f, "bad frame record");
  f->objs = xcalloc(f->nobj, sizeof *f->objs);
  for (size_t i = 0; i < f->nobj; i++) {
    struct obj *o = xcalloc(1, sizeof *o);
    if (parse_digest(arg(in), o->digest) != 0) frame_fail(f, "bad object digest in frame record");
    o->off = (size_t)strtoull(arg(in), NULL, 10);
    o->size = (size_t)strtoull(arg(in), NULL, 10);
    if (o->size > f->raw_len || o->off > f->raw_len - o->size) frame_fail(f, "object past the end of its frame");
    /* objects in offset order, apart (a streamed frame routes them in one pass) */
    if (i > 0 && o->off < f->objs[i - 1]->off + f->objs[i - 1]->size) frame_fail(f, "objects out of order or overlapping");
    o->state = PENDING;
    f->objs[i] = o;
  }
  const char *src = arg(in);
  f->src = src[0] == '\0' ? NULL : strdup(src);
  f->src_off = (off_t)strtoull(arg(in), NULL, 10);
  f->comp_len = (size_t)strtoull(arg(in), NULL, 10);
  if (f->comp_len == 0 || (f->src == NULL && (f->raw_len > MAX_HELD_FRAME || f->comp_len > 2 * MAX_HELD_FRAME))) frame_fail(f, "bad frame length");
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < f->nobj; i++) {
    if (lookup(f->objs[i]->digest) != NULL) frame_fail(f, "object sent twice");
    insert(f->objs[i]);
  }
  if (f->src == NULL) {
    /* bytes in the record: held in the queue (bounded) until the decoder takes them */
    while (q_bytes > 0 && q_bytes + f->comp_len > QUEUE_BUDGET) wait_main(&cv_room);
    f->comp = take_buffer(f->comp_len, &f->comp_cap);
    pthread_mutex_unlock(&mu);
    if (fread(f->comp, 1, f->comp_len, in) != f->comp_len) { fprintf(stderr, "fsmeta: truncated record\n"); quit(); }
    pthread_mutex_lock(&mu);
  }
  struct fqueue *q = f->raw_len > MAX_HELD_FRAME ? &stream_q : &held_q;
  if (!q->started) {
    if (pthread_create(&q->thread, NULL, decoder, q) != 0) { fprintf(stderr, "fsmeta: cannot start a decoding thread\n"); quit(); }
    q->started = 1;
  }
  if (q->tail) q->tail->next = f;
  else q->head = f;
  q->tail = f;
  if (f->src == NULL) q_bytes += f->comp_len;
  pthread_cond_signal(&q->cv);
  /* a lay-out thread (Y) may wait for these objects' record */
  pthread_cond_broadcast(&cv_ready);
  pthread_mutex_unlock(&mu);
}

/* Gives the spilled object its metadata where it lies, links it at path, then publishes it. */
static void adopt_file(const char *path, const struct meta *m, const char *src) {
  int fd = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) fail("open", src);
  set_meta(fd, m, src, 1);
  if (close(fd) != 0) fail("close", src);
  if (link(src, path) != 0) fail("link", path);
  if (m->pool[0] == '\0' ? unlink(src) != 0 : publish(src, m->pool) != 0) fail("publish", m->pool);
}

/* Places a decoded object (taken out of the table) at path with its metadata, then frees it. */
static void place_decoded(struct obj *o, const char *path, const struct meta *m) {
  if (o->state == READY) {
    struct frame *f = o->frame;
    create_file(path, m, (const char *)f->raw + o->off, o->size);
    pthread_mutex_lock(&mu);
    if (--f->refs == 0) {
      held -= f->raw_len;
      free_frame(f);
      pthread_cond_signal(&held_q.cv);
    }
    pthread_mutex_unlock(&mu);
  } else {
    char src[PATH_MAX];
    spill_path(src, sizeof src, o);
    adopt_file(path, m, src);
  }
  free(o);
}

/* G path uid gid mode sec nsec pool nx [name hexvalue]*nx hex */
static void place_object(FILE *in, const char *field_path) {
  char *path = strdup(field_path);
  struct meta m;
  read_meta(in, &m);
  unsigned char d[32];
  if (parse_digest(arg(in), d) != 0) { fprintf(stderr, "fsmeta: bad object digest for %s\n", path); quit(); }
  pthread_mutex_lock(&mu);
  struct obj *o = lookup(d);
  if (o == NULL) { fprintf(stderr, "fsmeta: object for %s was not sent in a frame\n", path); quit(); }
  while (o->state == PENDING) wait_main(&cv_ready);
  remove_obj(o);
  pthread_mutex_unlock(&mu);
  place_decoded(o, path, &m);
  free_meta(&m);
  free(path);
}

/*
 * Pool links made on a thread of their own: a link per file into the pool's directories was
 * 10-15% of a lay-out's critical path (measured), and nothing in the same lay-out uses a pool
 * name it makes (node, or the lay-out of a Y record, decides from what it saw before), so they
 * may trail the tree. Bounded:
 * past LINKS_QUEUED waiting, this thread links itself. All are made before the helper exits.
 */
#define LINKS_QUEUED 65536
/* Links handed to the thread at a time: waking it per link was a futex call or two per file,
   a third of the helper's system calls (measured). */
#define LINK_BATCH 256
struct pending_link {
  char *path, *pool;
  struct pending_link *next;
};
static pthread_mutex_t link_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t link_cv = PTHREAD_COND_INITIALIZER;
static struct pending_link *links_head, *links_tail;
static size_t links_queued;
static int links_done, linker_started;
static pthread_t linker_thread;

static void *linker(void *unused) {
  (void)unused;
  yield_to_main();
  pthread_mutex_lock(&link_mu);
  for (;;) {
    while (links_queued < LINK_BATCH && !links_done) pthread_cond_wait(&link_cv, &link_mu);
    struct pending_link *l = links_head;
    if (l == NULL) break;
    /* the whole queue at once: one hand-off per batch, not per link */
    links_head = links_tail = NULL;
    links_queued = 0;
    pthread_mutex_unlock(&link_mu);
    while (l != NULL) {
      if (link(l->path, l->pool) != 0 && errno != EEXIST) {
        fprintf(stderr, "fsmeta: publish %s: %s\n", l->pool, strerror(errno));
        quit();
      }
      struct pending_link *next = l->next;
      free(l->path);
      free(l);
      l = next;
    }
    pthread_mutex_lock(&link_mu);
  }
  pthread_mutex_unlock(&link_mu);
  return NULL;
}

static void link_later(const char *path, const char *pool) {
  pthread_mutex_lock(&link_mu);
  if (!linker_started) linker_started = pthread_create(&linker_thread, NULL, linker, NULL) == 0 ? 1 : -1;
  if (linker_started < 0 || links_queued >= LINKS_QUEUED) {
    pthread_mutex_unlock(&link_mu);
    if (link(path, pool) != 0 && errno != EEXIST) fail("publish", pool);
    return;
  }
  size_t plen = strlen(path) + 1, qlen = strlen(pool) + 1;
  struct pending_link *l = xmalloc(sizeof *l);
  /* one allocation for both names */
  l->path = xmalloc(plen + qlen);
  memcpy(l->path, path, plen);
  l->pool = l->path + plen;
  memcpy(l->pool, pool, qlen);
  l->next = NULL;
  if (links_tail) links_tail->next = l;
  else links_head = l;
  links_tail = l;
  if (++links_queued == LINK_BATCH) pthread_cond_signal(&link_cv);
  pthread_mutex_unlock(&link_mu);
}

#include "fsmeta-manifest.c"

/* End of input: the lay-out of a Y record finishes, the decoders finish (a failure in a frame no
   record used still fails), and every pool link is made. */
static void end_frames(void) {
  pthread_mutex_lock(&mu);
  input_done = 1;
  pthread_cond_signal(&held_q.cv);
  pthread_cond_signal(&stream_q.cv);
  /* a lay-out thread waiting for an object no record will bring learns it */
  pthread_cond_broadcast(&cv_ready);
  pthread_mutex_unlock(&mu);
  if (lay_started) pthread_join(lay_thread, NULL);
  if (held_q.started) pthread_join(held_q.thread, NULL);
  if (stream_q.started) pthread_join(stream_q.thread, NULL);
  if (linker_started > 0) {
    pthread_mutex_lock(&link_mu);
    links_done = 1;
    pthread_cond_signal(&link_cv);
    pthread_mutex_unlock(&link_mu);
    pthread_join(linker_thread, NULL);
  }
}
#endif /* FSMETA_PACKS */

int main(int argc, char **argv) {
  FILE *in = stdin;
  char *op;
  /*
   * Dies with the process that started it: a pull killed with SIGKILL left this helper waiting
   * on its pipe for minutes, holding the staging dir open. The check after covers a parent that
   * died before the prctl (we were then reparented).
   */
  pid_t parent = getppid();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent || parent == 1) _exit(1);
  if (argc > 1 && chdir(argv[1]) != 0) fail("chdir", argv[1]);
  /* modes given are exact: F creates files with theirs; everything else is chmod-ed later */
  umask(0);
  self_uid = geteuid();
  self_gid = getegid();
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
      if (lsetxattr(path, name_copy, val, len, 0) != 0) fail_xattr(path, name_copy, len);
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
#ifdef FSMETA_PACKS
    case 'Q':
      spill_dir = strdup(path);
      held_budget = (size_t)strtoull(arg(in), NULL, 10);
      break;
    case 'Z':
      read_frame(in, path);
      break;
    case 'G':
      place_object(in, path);
      break;
    case 'Y':
      start_lay_out(in, path);
      break;
#endif
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
#ifdef FSMETA_PACKS
  end_frames();
#endif
  return 0;
}
