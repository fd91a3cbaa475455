/*
 * Bind mounts of host paths into a sandbox (--bind-source PATH --bind-target PATH
 * [--bind-readonly 0|1], repeatable; read-only unless `--bind-readonly 0`). Included by
 * sandbox-launch.c; holder_setup runs the steps in this order:
 *
 *   1. bind_tree, once per bind: the source is opened without following any symlink (the runtime
 *      resolved it once on the host: one swapped in since is refused, never followed), cloned with
 *      every mount below it (open_tree), and given nosuid, nodev, private propagation and, unless rw
 *      was asked, read-only. As root the mapper does it, in the initial user namespace, and sends the
 *      clone over the idmap socket: there a source owned by the caller (root) is also idmapped through
 *      the sandbox's user namespace, so its files show with their owners (root's as the sandbox's
 *      root) and the sandbox acts as them. Rootless, the holder does it while still the caller (it
 *      can reach what the caller can) in its own mount namespace; no idmapping is possible there, so
 *      the files show as nobody and the sandbox gets what their modes give others.
 *   2. make_bind_points, before the overlay is mounted: a mount point per target in the sandbox's own
 *      top lower dir `e` (a dir or an empty file, as the source is, with its parents), as Docker's
 *      init layer holds them: the bind never writes the sandbox's upper, so diffs, snapshots and
 *      forks never see it. Parents take the mode and owner the layers give that dir (a home dir of
 *      0700 stays so); a layer's symlink or file on the way is shadowed by the dir, never followed.
 *   3. attach_binds, on the merged root: each target opened beneath the root, through no symlink and
 *      no other mount (a fork's copy of its parent's writes, above `e`, might plant one), and the
 *      clone moved onto that very dentry.
 *
 * Targets are absolute, without ".", ".." or empty components, not "/" and not under /proc, /dev or
 * /sys (init mounts those after the binds), none inside another.
 */
#include <linux/openat2.h>

#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

static int openat2_path(int dirfd, const char *path, int flags, unsigned long long resolve) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (unsigned long long)(flags | O_PATH | O_CLOEXEC);
  how.resolve = resolve;
  return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* One target's syntax (see the top of this file); dies naming what is wrong. */
static void check_bind_target(const char *t) {
  errno = 0;
  if (t == NULL || t[0] != '/') die("bind target %s: not an absolute path", t == NULL ? "(none)" : t);
  if (strlen(t) >= 4096) die("bind target %.64s...: too long", t);
  if (t[1] == '\0') die("bind target /: the sandbox's root cannot be a mount point");
  for (const char *c = t + 1; *c != '\0';) {
    const char *end = strchr(c, '/');
    size_t len = end == NULL ? strlen(c) : (size_t)(end - c);
    if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
      die("bind target %s: empty, \".\" and \"..\" components are refused", t);
    if (c == t + 1 && ((len == 4 && strncmp(c, "proc", 4) == 0) || (len == 3 && (strncmp(c, "dev", 3) == 0 || strncmp(c, "sys", 3) == 0))))
      die("bind target %s: /proc, /dev and /sys are the sandbox's own", t);
    if (end == NULL) break;
    c = end + 1;
    if (*c == '\0') die("bind target %s: a trailing \"/\" is refused", t);
  }
}

/* Every bind complete, every target well-formed, none equal to or inside another. */
static void check_binds(const struct opts *o) {
  for (int i = 0; i < o->n_binds; i++) {
    const struct bind_opt *b = &o->binds[i];
    errno = 0;
    if (b->source == NULL || b->source[0] != '/') die("bind source %s: not an absolute path", b->source == NULL ? "(none)" : b->source);
    check_bind_target(b->target);
    for (int j = 0; j < i; j++) {
      const char *p = o->binds[j].target, *q = b->target;
      size_t lp = strlen(p), lq = strlen(q);
      const char *shorter = lp <= lq ? p : q, *longer = lp <= lq ? q : p;
      size_t ls = lp <= lq ? lp : lq;
      if (strncmp(shorter, longer, ls) == 0 && (longer[ls] == '\0' || longer[ls] == '/')) die("bind targets %s and %s: one is inside the other", p, q);
    }
  }
}

/*
 * Step 1 (see the top): the clone of one source with the sandbox's attributes. `userns_fd` >= 0
 * (the mapper, as root): a source owned by the caller is idmapped through that user namespace.
 */
static int bind_tree(const struct bind_opt *b, int userns_fd) {
  int fd = openat2_path(AT_FDCWD, b->source, 0, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) die("bind source %s (it must exist, with no symlink on its path)", b->source);
  struct stat st;
  if (fstat(fd, &st) < 0) die("stat bind source %s", b->source);
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    errno = 0;
    die("bind source %s: neither a directory nor a regular file", b->source);
  }
  int t = (int)syscall(SYS_open_tree, fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
  if (t < 0) die("clone the mount of bind source %s", b->source);
  close(fd);
  struct mount_attr a;
  memset(&a, 0, sizeof a);
  a.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (b->readonly ? MOUNT_ATTR_RDONLY : 0);
  a.propagation = MS_PRIVATE;
  int idmap = userns_fd >= 0 && st.st_uid == getuid();
  if (idmap) {
    a.attr_set |= MOUNT_ATTR_IDMAP;
    a.userns_fd = (uint64_t)userns_fd;
  }
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) < 0)
    die(idmap ? "mount bind source %s idmapped (its file system, or one mounted below it, may not support idmapped mounts)" : "set the attributes of bind source %s",
        b->source);
  return t;
}

/* In the mapper: the clone of every bind source, in order, on `sock` (after the lowers, if any). */
static void send_bind_trees(const struct opts *o, int userns_fd, int sock) {
  for (int i = 0; i < o->n_binds; i++) {
    int t = bind_tree(&o->binds[i], userns_fd);
    send_fd(sock, t);
    close(t);
  }
}

/* In the holder, as root: the clones the mapper sent, in order. */
static void receive_bind_trees(struct opts *o, int sock) {
  for (int i = 0; i < o->n_binds; i++) {
    o->binds[i].tree = receive_fd(sock);
    if (o->binds[i].tree < 0) {
      errno = 0;
      die("the mount of bind source %s never arrived", o->binds[i].source);
    }
  }
}

/*
 * The mode and owner the sandbox would see at `rel` (a path below the root) without the mount
 * points: the first of the lower dirs (top first) that has it decides; a directory there gives
 * its own, anything else (a file, a symlink, a whiteout) or no lower with it gives 0755 root's
 * (1777 for /tmp, as claim_mount_points makes it).
 */
static void lower_dir_attrs(const int *lfds, int n, const char *rel, mode_t *mode, uid_t *uid, gid_t *gid) {
  *mode = strcmp(rel, "tmp") == 0 ? 01777 : 0755;
  *uid = 0;
  *gid = 0;
  for (int i = 0; i < n; i++) {
    int fd = openat2_path(lfds[i], rel, O_NOFOLLOW, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      return;
    }
    struct stat st;
    int ok = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    close(fd);
    if (ok) {
      *mode = st.st_mode & 07777;
      *uid = st.st_uid;
      *gid = st.st_gid;
    }
    return;
  }
}

/*
 * Step 2 (see the top): the mount points in `e`, the sandbox's own top lower dir, with `lower` the
 * overlay's lowerdir option below it (for the parents' modes and owners).
 */
static void make_bind_points(const struct opts *o, const char *e, const char *lower) {
  if (o->n_binds == 0) return;
  char buf[16384];
  char *paths[MAX_LOWERS];
  int lfds[MAX_LOWERS];
  int n = split_lowers(lower, buf, sizeof buf, paths);
  for (int i = 0; i < n; i++)
    if ((lfds[i] = open(paths[i], O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) die("open lower dir %s", paths[i]);
  for (int i = 0; i < o->n_binds; i++) {
    const struct bind_opt *b = &o->binds[i];
    struct stat src;
    if (fstat(b->tree, &src) < 0) die("stat the mount of bind source %s", b->source);
    int dir = open(e, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dir < 0) die("open %s", e);
    char rel[4096];
    xsnprintf(rel, sizeof rel, "%s", b->target + 1);
    for (char *c = rel;;) {
      char *slash = strchr(c, '/');
      int last = slash == NULL;
      if (!last) *slash = '\0';
      struct stat st;
      if (fstatat(dir, c, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        int want_dir = !last || S_ISDIR(src.st_mode);
        if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
          errno = 0;
          die("bind target %s: /%s is the runtime's own %s", b->target, rel, S_ISDIR(st.st_mode) ? "directory" : "file");
        }
      } else if (errno != ENOENT) die("stat the mount point of %s", b->target);
      else if (last && !S_ISDIR(src.st_mode)) {
        int f = openat(dir, c, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (f < 0) die("make the mount point of %s", b->target);
        close(f);
      } else {
        mode_t mode;
        uid_t uid;
        gid_t gid;
        lower_dir_attrs(lfds, n, rel, &mode, &uid, &gid);
        if (mkdirat(dir, c, 0700) < 0 || fchownat(dir, c, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 || fchmodat(dir, c, mode, 0) < 0)
          die("make the mount point of %s", b->target);
      }
      if (last) break;
      int next = openat(dir, c, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
      if (next < 0) die("open the mount point of %s", b->target);
      close(dir);
      dir = next;
      *slash = '/';
      c = slash + 1;
    }
    close(dir);
  }
  for (int i = 0; i < n; i++) close(lfds[i]);
}

/* Step 3 (see the top): each clone moved onto its target in the merged root `rootfd`. */
static void attach_binds(struct opts *o, int rootfd) {
  for (int i = 0; i < o->n_binds; i++) {
    struct bind_opt *b = &o->binds[i];
    int t = openat2_path(rootfd, b->target + 1, O_NOFOLLOW, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
    if (t < 0) die("bind target %s in the sandbox root (a symlink or another mount on its path is refused)", b->target);
    struct stat st, src;
    if (fstat(t, &st) < 0 || fstat(b->tree, &src) < 0) die("stat bind target %s", b->target);
    if (S_ISDIR(st.st_mode) != S_ISDIR(src.st_mode) || (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))) {
      errno = 0;
      die("bind target %s: the sandbox has a %s there, the source %s is a %s", b->target,
          S_ISDIR(st.st_mode) ? "directory" : S_ISLNK(st.st_mode) ? "symlink" : "file", b->source, S_ISDIR(src.st_mode) ? "directory" : "file");
    }
    if (syscall(SYS_move_mount, b->tree, "", t, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) die("mount %s on %s", b->source, b->target);
    close(t);
    close(b->tree);
    b->tree = -1;
  }
}
