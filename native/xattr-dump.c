/*
 * xattr-dump: every extended attribute of every entry below a directory, in getfattr's dump
 * format (what `getfattr -R -P -h -d -m - -e base64 --absolute-names ROOT` prints), for capture
 * (src/layer/xattr.ts), walking as capture walks an untrusted tree: each directory is opened
 * relative to its parent's fd with O_NOFOLLOW, each entry's attributes are read through
 * /proc/<pid>/fd/<dirfd>/<name> with the l* calls, which do not follow `name`. getfattr walks by
 * whole path, so a directory swapped for a symlink mid-walk made it read (and capture record) the
 * attributes of whatever the link pointed at, host files included.
 *
 * Usage: xattr-dump ROOT     ROOT is trusted (opened as given; capture passes /proc/<pid>/fd/<n>).
 * Output: for each entry with attributes, `# file: ROOT/REL`, then `NAME=0sBASE64` per attribute
 * (empty values as `NAME=`), then a blank line. Backslash, newline and other control bytes in
 * paths and names (and `=` in names) are written as \ooo octal escapes, every other byte raw.
 * The root's own attributes are not printed. Exit 0; 1 with a message on stderr on any error
 * (an entry that vanished mid-walk included: the tree changed, capture fails); a path longer than
 * PATH_MAX reports "File name too long", as getfattr does.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static char rel[PATH_MAX + 1];
static char *names, *value;
static size_t names_cap = 1 << 16, value_cap = 1 << 16;

static void die(const char *what, const char *path) {
  fprintf(stderr, "xattr-dump: %s %s: %s\n", what, path, strerror(errno));
  exit(1);
}

static void put_escaped(const char *s, size_t n, int is_name) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f || c == '\\' || (is_name && c == '='))
      printf("\\%03o", c);
    else
      putchar(c);
  }
}

static void put_base64(const unsigned char *v, size_t n) {
  static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < n; i += 3) {
    unsigned x = (unsigned)v[i] << 16 | (i + 1 < n ? (unsigned)v[i + 1] << 8 : 0) | (i + 2 < n ? v[i + 2] : 0);
    putchar(tbl[x >> 18 & 63]);
    putchar(tbl[x >> 12 & 63]);
    putchar(i + 1 < n ? tbl[x >> 6 & 63] : '=');
    putchar(i + 2 < n ? tbl[x & 63] : '=');
  }
}

/* The attributes of `name` in the directory `dfd` (relative path `rel`), printed if it has any. */
static void dump_entry(const char *root, int dfd, const char *name) {
  char at[64 + NAME_MAX];
  /* /proc/<pid> rather than /proc/self: one symlink less to resolve per call */
  snprintf(at, sizeof at, "/proc/%d/fd/%d/%s", (int)getpid(), dfd, name);
  ssize_t len;
  while ((len = llistxattr(at, names, names_cap)) < 0 && errno == ERANGE) names = realloc(names, names_cap *= 4);
  if (len < 0) {
    if (errno == ENOTSUP) return;
    die("llistxattr", rel);
  }
  if (len == 0) return;
  printf("# file: ");
  put_escaped(root, strlen(root), 0);
  putchar('/');
  put_escaped(rel, strlen(rel), 0);
  putchar('\n');
  for (char *n = names; n < names + len; n += strlen(n) + 1) {
    ssize_t vlen;
    while ((vlen = lgetxattr(at, n, value, value_cap)) < 0 && errno == ERANGE) value = realloc(value, value_cap *= 4);
    if (vlen < 0) {
      if (errno == ENODATA) continue; /* removed since it was listed */
      die("lgetxattr", rel);
    }
    put_escaped(n, strlen(n), 1);
    putchar('=');
    if (vlen > 0) {
      printf("0s");
      put_base64((const unsigned char *)value, (size_t)vlen);
    }
    putchar('\n');
  }
  putchar('\n');
}

/* Walks the directory `dfd` (whose relative path, `rel`, is `rel_len` bytes long); closes it. */
static void walk(const char *root, int dfd, size_t rel_len) {
  DIR *d = fdopendir(dfd);
  if (d == NULL) die("fdopendir", rel);
  struct dirent *e;
  for (errno = 0; (e = readdir(d)) != NULL; errno = 0) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    size_t n = strlen(e->d_name);
    if (rel_len + (rel_len > 0) + n > PATH_MAX) {
      errno = ENAMETOOLONG;
      die("File name too long:", rel);
    }
    size_t at = rel_len;
    if (rel_len > 0) rel[at++] = '/';
    memcpy(rel + at, e->d_name, n + 1);
    dump_entry(root, dirfd(d), e->d_name);
    if (e->d_type == DT_DIR || e->d_type == DT_UNKNOWN) {
      int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0)
        walk(root, sub, at + n);
      else if (!(e->d_type == DT_UNKNOWN && (errno == ENOTDIR || errno == ELOOP)))
        die("openat", rel); /* a directory swapped for a symlink or gone: the tree changed */
    }
    rel[rel_len] = '\0';
  }
  if (errno != 0) die("readdir", rel);
  closedir(d);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: xattr-dump ROOT\n");
    return 2;
  }
  names = malloc(names_cap);
  value = malloc(value_cap);
  if (names == NULL || value == NULL) die("malloc", "");
  int root = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) die("open", argv[1]);
  rel[0] = '\0';
  walk(argv[1], root, 0);
  if (fflush(stdout) != 0) die("write", "stdout");
  return 0;
}
