/*
 * The Y record: the helper lays out a whole layer manifest itself, on a thread of its own, while
 * its main thread goes on reading the Z records of the frames that hold the objects it needs.
 * Included by fsmeta.c (with -DFSMETA_PACKS): it uses its object table, decoder and pool links.
 *
 * Why: node's side of a lay-out was about 50 us per entry (parsing, checking, deciding, encoding
 * records), on a machine whose two cores the helper's threads need too; small-file trees then
 * laid out slower than tar -x (measured: node_modules at 0.84x). Here an entry costs about 3 us
 * of user time over both passes (measured), beside its system calls.
 *
 * It is the exact counterpart of layer/manifest-read.ts (reading and checking a manifest) and
 * store/materialize.ts (laying it out, sharing files through the pool), for the manifests node
 * hands it: no backslash anywhere (so no escapes in strings: every path is its own bytes, and
 * so is every xattr name), files owned as given (no user namespace). Anything else goes through
 * node's lay-out.
 * A test feeds both the same valid and mutated manifests and compares what each accepts.
 *
 *   Y manifest shift whiteouts xattrns links tmpprefix expected repeated
 *     manifest   the decompressed, digest-checked manifest file
 *     shift      added to every uid and gid
 *     whiteouts  `c`: 0/0 character devices; `x`: overlay xattrs in namespace xattrns
 *     links      the store's pool directory (links/<hex>, links/<hex>.<key>)
 *     tmpprefix  a unique prefix for new pool inodes made by copying
 *     expected   concatenated hex digests of the objects this pull fetches (Z records bring
 *                them); any other content must already be in the pool
 *     repeated   concatenated hex digests of contents named by more than one file entry
 *
 * The lay-out reads the manifest twice (see lay_pass): entries without contents and every check
 * first, files and hardlinks second.
 *
 * A bad manifest prints one of these and ends the process (node maps them to its errors):
 *   fsmeta: manifest: invalid\tline N: <why>
 *   fsmeta: manifest: unsafe\t<path>\t<why>
 *   fsmeta: manifest: missing\t<hex>
 */

/* ---- sets and maps keyed by bytes ---- */

struct kv {
  struct kv *next;
  uint64_t h;
  size_t klen;
  char *val; /* a path (owned), or NULL for a set */
  unsigned char key[];
};

struct kmap {
  struct kv **slots;
  size_t cap, count;
};

static uint64_t hash_seed;

static uint64_t hash_bytes(const void *p, size_t n) {
  /* FNV-1a from a random start: entries come from a registry that may be hostile */
  const unsigned char *b = p;
  uint64_t h = 0xcbf29ce484222325ULL ^ hash_seed;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h ^ (h >> 29);
}

static struct kv *kmap_find(const struct kmap *m, const void *key, size_t klen) {
  if (m->cap == 0) return NULL;
  uint64_t h = hash_bytes(key, klen);
  for (struct kv *e = m->slots[h & (m->cap - 1)]; e; e = e->next)
    if (e->h == h && e->klen == klen && memcmp(e->key, key, klen) == 0) return e;
  return NULL;
}

/* Adds key (which must not be there yet) with `val` (taken over). */
static struct kv *kmap_add(struct kmap *m, const void *key, size_t klen, char *val) {
  if (m->count >= m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    struct kv **slots = xcalloc(cap, sizeof *slots);
    for (size_t i = 0; i < m->cap; i++)
      for (struct kv *e = m->slots[i], *n; e; e = n) {
        n = e->next;
        e->next = slots[e->h & (cap - 1)];
        slots[e->h & (cap - 1)] = e;
      }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
  }
  struct kv *e = xmalloc(sizeof *e + klen);
  e->h = hash_bytes(key, klen);
  e->klen = klen;
  e->val = val;
  memcpy(e->key, key, klen);
  e->next = m->slots[e->h & (m->cap - 1)];
  m->slots[e->h & (m->cap - 1)] = e;
  m->count++;
  return e;
}

static int kmap_remove(struct kmap *m, const void *key, size_t klen) {
  if (m->cap == 0) return 0;
  uint64_t h = hash_bytes(key, klen);
  for (struct kv **p = &m->slots[h & (m->cap - 1)]; *p; p = &(*p)->next) {
    struct kv *e = *p;
    if (e->h == h && e->klen == klen && memcmp(e->key, key, klen) == 0) {
      *p = e->next;
      free(e->val);
      free(e);
      m->count--;
      return 1;
    }
  }
  return 0;
}

/* ---- reporting ---- */

static long lay_line;

static void bad_line(const char *why) {
  fprintf(stderr, "fsmeta: manifest: invalid\tline %ld: %s\n", lay_line, why);
  quit();
}

static void unsafe(const char *path, size_t len, const char *why) {
  fprintf(stderr, "fsmeta: manifest: unsafe\t%.*s\t%s\n", (int)len, path, why);
  quit();
}

/* ---- one manifest line ---- */

enum { K_DIGEST = 1, K_GID = 2, K_MAJOR = 4, K_MINOR = 8, K_MODE = 16, K_MTIME = 32, K_OPAQUE = 64, K_PATH = 128, K_SIZE = 256, K_TARGET = 512, K_TYPE = 1024, K_UID = 2048, K_XATTRS = 4096 };
/* Entries with metadata may carry xattrs. */
#define K_META (K_GID | K_MODE | K_MTIME | K_UID)
enum { T_FILE, T_DIR, T_SYMLINK, T_HARDLINK, T_FIFO, T_CHAR, T_BLOCK, T_WHITEOUT };

static const struct { const char *name; int type; int keys; } SHAPES[] = {
  { "file", T_FILE, K_DIGEST | K_GID | K_MODE | K_MTIME | K_PATH | K_SIZE | K_TYPE | K_UID },
  { "dir", T_DIR, K_GID | K_MODE | K_MTIME | K_PATH | K_TYPE | K_UID },
  { "symlink", T_SYMLINK, K_GID | K_MODE | K_MTIME | K_PATH | K_TARGET | K_TYPE | K_UID },
  { "hardlink", T_HARDLINK, K_PATH | K_TARGET | K_TYPE },
  { "fifo", T_FIFO, K_GID | K_MODE | K_MTIME | K_PATH | K_TYPE | K_UID },
  { "char", T_CHAR, K_GID | K_MAJOR | K_MINOR | K_MODE | K_MTIME | K_PATH | K_TYPE | K_UID },
  { "block", T_BLOCK, K_GID | K_MAJOR | K_MINOR | K_MODE | K_MTIME | K_PATH | K_TYPE | K_UID },
  { "whiteout", T_WHITEOUT, K_PATH | K_TYPE },
};

/* A string value: its bytes in the line (no escapes in this lane). */
struct str {
  const char *p;
  size_t n;
};

struct entry {
  int type, keys, opaque;
  struct str path, target, mtime, type_name;
  struct str xattrs; /* the object's text, as canonical as the line (K_XATTRS) */
  unsigned char digest[32];
  uint64_t gid, uid, mode, size, major, minor;
};

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if there is none (as a fatal TextDecoder). */
static size_t utf8_len(const unsigned char *p, size_t n) {
  unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) len = 2;
  else if (c == 0xe0) { len = 3; lo = 0xa0; }
  else if (c >= 0xe1 && c <= 0xec) len = 3;
  else if (c == 0xed) { len = 3; hi = 0x9f; }
  else if (c >= 0xee && c <= 0xef) len = 3;
  else if (c == 0xf0) { len = 4; lo = 0x90; }
  else if (c >= 0xf1 && c <= 0xf3) len = 4;
  else if (c == 0xf4) { len = 4; hi = 0x8f; }
  else return 0;
  if (n < len || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  return len;
}

/* A JSON string as JSON.stringify writes it, given it needs no escapes: UTF-8, no control
   characters, no quote or backslash. */
static const char *parse_str(const char *p, const char *end, struct str *s) {
  if (p >= end || *p != '"') bad_line("not in canonical form");
  s->p = ++p;
  while (p < end && *p != '"') {
    unsigned char c = (unsigned char)*p;
    if (c < 0x20 || c == '\\') bad_line("not in canonical form");
    size_t k = utf8_len((const unsigned char *)p, (size_t)(end - p));
    if (k == 0) bad_line("not valid UTF-8");
    p += k;
  }
  if (p >= end) bad_line("not in canonical form");
  s->n = (size_t)(p - s->p);
  return p + 1;
}

/* A non-negative integer as JSON.stringify writes it, up to Number.MAX_SAFE_INTEGER. */
static const char *parse_count(const char *p, const char *end, uint64_t *v) {
  if (p >= end || *p < '0' || *p > '9') bad_line("not in canonical form");
  if (*p == '0') {
    *v = 0;
    p++;
  } else {
    uint64_t x = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
      x = x * 10 + (uint64_t)(*p - '0');
      if (x > 9007199254740991ULL) bad_line("a number out of range");
    }
    *v = x;
  }
  if (p < end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E')) bad_line("not in canonical form");
  return p;
}

static int str_is(const struct str *s, const char *lit) {
  return s->n == strlen(lit) && memcmp(s->p, lit, s->n) == 0;
}

/* checkRelativePath: relative, no empty, `.` or `..` component (no NUL: strings have none here). */
static void check_path(const struct str *s) {
  if (s->n == 0) unsafe(s->p, s->n, "empty path");
  if (s->p[0] == '/') unsafe(s->p, s->n, "absolute path");
  size_t start = 0;
  for (size_t i = 0; i <= s->n; i++) {
    if (i < s->n && s->p[i] != '/') continue;
    size_t len = i - start;
    const char *c = s->p + start;
    if (len == 0) unsafe(s->p, s->n, "empty path component");
    if (len == 1 && c[0] == '.') unsafe(s->p, s->n, "`.` component");
    if (len == 2 && c[0] == '.' && c[1] == '.') unsafe(s->p, s->n, "`..` component");
    start = i + 1;
  }
}

static char *cstr(const struct str *s) {
  char *c = xmalloc(s->n + 1);
  memcpy(c, s->p, s->n);
  c[s->n] = '\0';
  return c;
}

/* The next UTF-16 code unit of a UTF-8 string (valid, as parse_str leaves it); 0 at its end. */
static unsigned next_unit(const unsigned char **p, const unsigned char *end, unsigned *low) {
  if (*low) { unsigned u = *low; *low = 0; return u; }
  if (*p >= end) return 0;
  unsigned c = **p, cp;
  size_t k = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
  cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 0x07;
  for (size_t i = 1; i < k; i++) cp = (cp << 6) | ((*p)[i] & 0x3f);
  *p += k;
  if (cp < 0x10000) return cp + 1; /* +1: 0 means the end */
  cp -= 0x10000;
  *low = 0xdc00 + (cp & 0x3ff) + 1;
  return 0xd800 + (cp >> 10) + 1;
}

/* Order of two strings as JavaScript's default sort has it (UTF-16 code units), as canonicalJson sorts keys. */
static int cmp_utf16(const struct str *a, const struct str *b) {
  const unsigned char *pa = (const unsigned char *)a->p, *pb = (const unsigned char *)b->p;
  const unsigned char *ea = pa + a->n, *eb = pb + b->n;
  unsigned la = 0, lb = 0;
  for (;;) {
    unsigned x = next_unit(&pa, ea, &la);
    unsigned y = next_unit(&pb, eb, &lb);
    if (x != y) return x < y ? -1 : 1;
    if (x == 0) return 0;
  }
}

static int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Standard base64 with padding, as the manifest schema takes it: the decoded length, or -1. */
static long b64_check(const struct str *s) {
  if (s->n % 4 != 0) return -1;
  for (size_t i = 0; i < s->n; i++) {
    int pad = s->p[i] == '=';
    /* padding only in the last two places, and then to the end */
    if (pad ? i + 2 < s->n || (i + 1 < s->n && s->p[i + 1] != '=') : b64_value(s->p[i]) < 0) return -1;
  }
  size_t pads = s->n > 0 && s->p[s->n - 1] == '=' ? (s->n > 1 && s->p[s->n - 2] == '=' ? 2 : 1) : 0;
  return (long)(s->n / 4 * 3 - pads);
}

static unsigned char *b64_decode(const struct str *s, size_t *len) {
  *len = (size_t)b64_check(s);
  unsigned char *out = xmalloc(*len + 1);
  size_t o = 0;
  for (size_t i = 0; i < s->n; i += 4) {
    unsigned v = 0;
    for (size_t k = 0; k < 4; k++) v = (v << 6) | (unsigned)(s->p[i + k] == '=' ? 0 : b64_value(s->p[i + k]));
    for (size_t k = 0; k < 3 && o < *len; k++) out[o++] = (unsigned char)(v >> (16 - 8 * k));
  }
  return out;
}

/* The xattrs object: names (sorted, each once) to base64 values; `x` is its whole text. */
static const char *parse_xattrs(const char *p, const char *end, struct str *x) {
  x->p = p;
  if (p >= end || *p++ != '{') bad_line("xattrs: expected an object");
  struct str prev = { NULL, 0 };
  if (p < end && *p == '}') p++;
  else
    for (;;) {
      struct str name, value;
      p = parse_str(p, end, &name);
      if (p >= end || *p++ != ':') bad_line("not in canonical form");
      if (prev.p != NULL && cmp_utf16(&prev, &name) >= 0) bad_line("not in canonical form");
      prev = name;
      p = parse_str(p, end, &value);
      if (b64_check(&value) < 0) bad_line("xattrs: expected base64 values");
      if (p < end && *p == ',') { p++; continue; }
      if (p < end && *p == '}') { p++; break; }
      bad_line("not in canonical form");
    }
  x->n = (size_t)(p - x->p);
  return p;
}

/*
 * The xattrs of an entry into `m` (names and decoded values), in their (canonical) order, from
 * the object's text parse_xattrs checked: `{"name":"value",...}`. Pairs are counted by walking
 * them, not by their separators: a name may hold `:` or `,`.
 */
static void xattrs_into(const struct str *x, struct meta *m) {
  const char *end = x->p + x->n;
  struct str name, value;
  m->nx = 0;
  for (const char *p = x->p + 1; *p == '"'; m->nx++) p = parse_str(parse_str(p, end, &name) + 1, end, &value) + 1;
  if (m->nx == 0) return;
  m->names = xcalloc((size_t)m->nx, sizeof *m->names);
  m->vals = xcalloc((size_t)m->nx, sizeof *m->vals);
  m->lens = xcalloc((size_t)m->nx, sizeof *m->lens);
  const char *p = x->p + 1;
  for (long i = 0; i < m->nx; i++) {
    p = parse_str(parse_str(p, end, &name) + 1, end, &value) + 1;
    m->names[i] = cstr(&name);
    m->vals[i] = b64_decode(&value, &m->lens[i]);
  }
}

/*
 * Parses one line into `e`: canonical JSON (keys in order, no spaces, numbers and strings as
 * JSON.stringify writes them), then the schema of its type (layer/manifest.ts).
 */
static void parse_entry(const char *p, const char *end, struct entry *e) {
  memset(e, 0, sizeof *e);
  if (p >= end || *p++ != '{') bad_line("not valid JSON");
  const char *prev_key = "";
  size_t prev_len = 0;
  for (;;) {
    struct str key;
    p = parse_str(p, end, &key);
    if (p >= end || *p++ != ':') bad_line("not in canonical form");
    /* canonical: keys sorted, each once (all keys here are ASCII: byte order is JS order) */
    size_t m = key.n < prev_len ? key.n : prev_len;
    int c = memcmp(key.p, prev_key, m);
    if (c < 0 || (c == 0 && key.n <= prev_len)) bad_line("not in canonical form");
    prev_key = key.p;
    prev_len = key.n;
    int bit;
    if (str_is(&key, "digest")) {
      struct str d;
      p = parse_str(p, end, &d);
      char hex[65];
      if (d.n != 71 || memcmp(d.p, "sha256:", 7) != 0) bad_line("digest: expected sha256:<64 hex digits>");
      memcpy(hex, d.p + 7, 64);
      hex[64] = '\0';
      if (parse_digest(hex, e->digest) != 0) bad_line("digest: expected sha256:<64 hex digits>");
      bit = K_DIGEST;
    } else if (str_is(&key, "gid")) { p = parse_count(p, end, &e->gid); bit = K_GID; }
    else if (str_is(&key, "major")) { p = parse_count(p, end, &e->major); bit = K_MAJOR; }
    else if (str_is(&key, "minor")) { p = parse_count(p, end, &e->minor); bit = K_MINOR; }
    else if (str_is(&key, "mode")) { p = parse_count(p, end, &e->mode); bit = K_MODE; }
    else if (str_is(&key, "mtime")) {
      p = parse_str(p, end, &e->mtime);
      size_t digits = e->mtime.n > 0 && e->mtime.p[0] == '-' ? e->mtime.n - 1 : e->mtime.n;
      if (digits < 1 || digits > 30) bad_line("mtime: expected integer nanoseconds as a string");
      for (size_t i = e->mtime.n - digits; i < e->mtime.n; i++)
        if (e->mtime.p[i] < '0' || e->mtime.p[i] > '9') bad_line("mtime: expected integer nanoseconds as a string");
      bit = K_MTIME;
    } else if (str_is(&key, "opaque")) {
      if (end - p < 4 || memcmp(p, "true", 4) != 0) bad_line("opaque: expected true");
      p += 4;
      e->opaque = 1;
      bit = K_OPAQUE;
    } else if (str_is(&key, "path")) { p = parse_str(p, end, &e->path); bit = K_PATH; }
    else if (str_is(&key, "size")) { p = parse_count(p, end, &e->size); bit = K_SIZE; }
    else if (str_is(&key, "target")) { p = parse_str(p, end, &e->target); bit = K_TARGET; }
    else if (str_is(&key, "type")) { p = parse_str(p, end, &e->type_name); bit = K_TYPE; }
    else if (str_is(&key, "uid")) { p = parse_count(p, end, &e->uid); bit = K_UID; }
    else if (str_is(&key, "xattrs")) { p = parse_xattrs(p, end, &e->xattrs); bit = K_XATTRS; }
    else bad_line("an unknown key");
    e->keys |= bit;
    if (p < end && *p == ',') { p++; continue; }
    if (p < end && *p == '}') { p++; break; }
    bad_line("not in canonical form");
  }
  if (p != end) bad_line("not in canonical form");
  size_t t = 0;
  while (t < sizeof SHAPES / sizeof SHAPES[0] && !str_is(&e->type_name, SHAPES[t].name)) t++;
  if (t == sizeof SHAPES / sizeof SHAPES[0]) bad_line("type: not a known entry type");
  e->type = SHAPES[t].type;
  int want = SHAPES[t].keys | (e->type == T_DIR ? (e->keys & K_OPAQUE) : 0) | ((SHAPES[t].keys & K_META) == K_META ? (e->keys & K_XATTRS) : 0);
  if (e->keys != want) bad_line("the keys do not match the entry type");
  if ((e->keys & K_MODE) && e->mode > 07777) bad_line("mode: out of range");
  if ((e->keys & K_UID) && e->uid > 0xffffffffULL) bad_line("uid: out of range");
  if ((e->keys & K_GID) && e->gid > 0xffffffffULL) bad_line("gid: out of range");
  if ((e->keys & K_MAJOR) && (e->major > 0xffffffffULL || e->minor > 0xffffffffULL)) bad_line("major, minor: out of range");
  if (e->path.n == 0) bad_line("path: empty");
  if ((e->keys & K_TARGET) && e->target.n == 0) bad_line("target: empty");
  check_path(&e->path);
  if (e->type == T_HARDLINK) check_path(&e->target);
}

/* ---- lay-out ---- */

struct lay {
  char *manifest, *links, *tmp_prefix, *xattr_ns;
  long long shift;
  int chardev_whiteouts;
  struct kmap dirs, files, staged, repeated, exact, any_copy, fresh;
  unsigned long tmp_count;
};

/* Directories get their metadata last, deepest first, once all their children exist. */
struct dir_meta {
  char *path; /* the value in lay.dirs */
  uid_t uid;
  gid_t gid;
  mode_t mode;
  struct timespec ts[2];
  int opaque;
  struct str xattrs; /* a copy of the entry's xattrs text (K_XATTRS), or empty */
};

/* Seconds and nanoseconds of an mtime string (floor division, as node's splitNs). */
static void split_ns(const struct str *s, struct timespec ts[2]) {
  __int128 v = 0;
  int neg = s->p[0] == '-';
  for (size_t i = neg ? 1 : 0; i < s->n; i++) v = v * 10 + (s->p[i] - '0');
  if (neg) v = -v;
  __int128 sec = v / 1000000000, nsec = v % 1000000000;
  if (nsec < 0) { nsec += 1000000000; sec -= 1; }
  /* as strtoll reads node's decimal seconds: saturated */
  if (sec > LLONG_MAX) sec = LLONG_MAX;
  if (sec < LLONG_MIN) sec = LLONG_MIN;
  ts[0].tv_sec = ts[1].tv_sec = (time_t)sec;
  ts[0].tv_nsec = ts[1].tv_nsec = (long)nsec;
}

/* The metadata a file entry gets (shifted ids), as F and G records carry it. */
static void meta_of(const struct lay *l, const struct entry *e, struct meta *m, char *pool) {
  memset(m, 0, sizeof *m);
  m->uid = (uid_t)(e->uid + (uint64_t)l->shift);
  m->gid = (gid_t)(e->gid + (uint64_t)l->shift);
  m->mode = (mode_t)e->mode;
  split_ns(&e->mtime, m->ts);
  m->pool = pool;
  m->own = m->uid == self_uid && m->gid == self_gid;
  if (e->keys & K_XATTRS) xattrs_into(&e->xattrs, m);
}

/* O, M (not for symlinks), X and T on a path, as node's applyMeta sends them. */
static void path_meta(const char *path, const struct meta *m, int is_symlink) {
  if (lchown(path, m->uid, m->gid) != 0) fail("chown", path);
  if (!is_symlink && chmod(path, m->mode) != 0) fail("chmod", path);
  for (long i = 0; i < m->nx; i++)
    if (lsetxattr(path, m->names[i], m->vals[i], m->lens[i], 0) != 0) fail_xattr(path, m->names[i], m->lens[i]);
  if (utimensat(AT_FDCWD, path, m->ts, AT_SYMLINK_NOFOLLOW) != 0) fail("utimensat", path);
}

/* materialize.ts's metaKey: sha256 of the canonical JSON of the metadata, 24 hex digits. */
static void meta_key(const struct meta *m, const struct entry *e, char out[25]) {
  char head[256];
  int n = snprintf(head, sizeof head, "{\"gid\":%u,\"mode\":%u,\"mtime\":\"%.*s\",\"uid\":%u", (unsigned)m->gid, (unsigned)m->mode, (int)e->mtime.n, e->mtime.p, (unsigned)m->uid);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  /* the xattrs text is canonical already: the line was */
  int ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(ctx, head, (size_t)n) == 1 &&
           (!(e->keys & K_XATTRS) || (EVP_DigestUpdate(ctx, ",\"xattrs\":", 10) == 1 && EVP_DigestUpdate(ctx, e->xattrs.p, e->xattrs.n) == 1)) &&
           EVP_DigestUpdate(ctx, "}", 1) == 1 && EVP_DigestFinal_ex(ctx, md, &len) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) { fprintf(stderr, "fsmeta: sha256 failed\n"); quit(); }
  char hex[65];
  hex_of(md, hex);
  memcpy(out, hex, 24);
  out[24] = '\0';
}

static const unsigned char EMPTY_SHA256[32] = {
  0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
  0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
};

/* Waits for a fetched object (its Z record may still be on its way); NULL if none will come. */
static struct obj *await_object(const unsigned char *d) {
  pthread_mutex_lock(&mu);
  struct obj *o;
  while ((o = lookup(d)) == NULL && !input_done) wait_main(&cv_ready);
  if (o != NULL) {
    while (o->state == PENDING) wait_main(&cv_ready);
    remove_obj(o);
  }
  pthread_mutex_unlock(&mu);
  return o;
}

/* A new pool inode for `m`: a copy of `from` given its metadata, linked at path, then published. */
static void publish_copy(struct lay *l, const char *path, const char *from, const struct meta *m, const char *variant) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s%lu", l->tmp_prefix, l->tmp_count++);
  if (copy_file(from, tmp) != 0) fail("copy", tmp);
  path_meta(tmp, m, 0);
  if (link(tmp, path) != 0) fail("link", path);
  if (publish(tmp, variant) != 0) fail("publish", variant);
}

static int fits(const char *pool, const struct meta *m, int *is_file) {
  struct stat st;
  *is_file = lstat(pool, &st) == 0 && S_ISREG(st.st_mode);
  return *is_file && (st.st_mode & 07777) == m->mode && st.st_uid == m->uid && st.st_gid == m->gid && st.st_mtim.tv_sec == m->ts[1].tv_sec && st.st_mtim.tv_nsec == m->ts[1].tv_nsec;
}

/* The pool name of a file's exact metadata: made when first needed (a sha256 each), then kept in `variant`. */
static char *variant_name(const struct lay *l, const struct entry *e, const struct meta *m, const char *hex, char variant[PATH_MAX]) {
  if (variant[0] == '\0') {
    char key[25];
    meta_key(m, e, key);
    snprintf(variant, PATH_MAX, "%s/%s.%s", l->links, hex, key);
  }
  return variant;
}

/* LinkPool.place in materialize.ts: links path to a pool inode with the file's content and metadata. */
static void place_file(struct lay *l, const struct entry *e, const char *path) {
  char hex[65], primary[PATH_MAX], variant[PATH_MAX];
  int has_x = (e->keys & K_XATTRS) != 0;
  hex_of(e->digest, hex);
  struct meta m;
  snprintf(primary, sizeof primary, "%s/%s", l->links, hex);
  meta_of(l, e, &m, primary);
  variant[0] = '\0';
  /* a file with xattrs has its own pool inode even when fetched here: the primary one has none */
  if (has_x) m.pool = variant_name(l, e, &m, hex, variant);
  int remember = kmap_find(&l->repeated, e->digest, 32) != NULL;
  /* content and exact metadata (ids, mode, time, xattrs): where this run put it */
  size_t siglen = 32 + 3 * sizeof(uint32_t) + e->mtime.n + 1 + (has_x ? e->xattrs.n : 0);
  unsigned char *sig = NULL;
  if (remember) {
    uint32_t ids[3] = { (uint32_t)m.mode, (uint32_t)m.uid, (uint32_t)m.gid };
    sig = xmalloc(siglen);
    unsigned char *q = sig;
    memcpy(q, e->digest, 32);
    memcpy(q += 32, ids, sizeof ids);
    memcpy(q += sizeof ids, e->mtime.p, e->mtime.n);
    q += e->mtime.n;
    *q++ = (unsigned char)has_x;
    if (has_x) memcpy(q, e->xattrs.p, e->xattrs.n);
    struct kv *same = kmap_find(&l->exact, sig, siglen);
    if (same != NULL) {
      if (link(same->val, path) != 0) fail("link", path);
      free(sig);
      free_xattrs(&m);
      return;
    }
  }
  int staged = kmap_remove(&l->staged, e->digest, 32);
  if (staged && memcmp(e->digest, EMPTY_SHA256, 32) == 0) {
    /* the empty content is in no frame (packs hold no empty objects): nothing to verify */
    create_file(path, &m, "", 0);
    if (remember) kmap_add(&l->fresh, e->digest, 32, NULL);
  } else if (staged) {
    /* fetched for this lay-out: verified by the decoder, written here, pooled */
    struct obj *o = await_object(e->digest);
    if (o == NULL) { fprintf(stderr, "fsmeta: object %s for %s was not sent in a frame\n", hex, path); quit(); }
    place_decoded(o, path, &m);
    if (remember) kmap_add(&l->fresh, e->digest, 32, NULL);
  } else if (kmap_find(&l->fresh, e->digest, 32) != NULL) {
    /* first laid out by this run, whose pool inode holds other metadata: a copy of ours */
    publish_copy(l, path, kmap_find(&l->any_copy, e->digest, 32)->val, &m, variant_name(l, e, &m, hex, variant));
  } else {
    int primary_is_file;
    if (fits(primary, &m, &primary_is_file) && !has_x) {
      if (link(primary, path) != 0) fail("link", path);
    } else {
      struct stat st;
      if (lstat(variant_name(l, e, &m, hex, variant), &st) == 0 && S_ISREG(st.st_mode)) {
        if (link(variant, path) != 0) fail("link", path);
      } else {
        struct kv *copy = kmap_find(&l->any_copy, e->digest, 32);
        const char *from = copy != NULL ? copy->val : primary_is_file ? primary : NULL;
        if (from == NULL) {
          fprintf(stderr, "fsmeta: manifest: missing\t%s\n", hex);
          quit();
        }
        publish_copy(l, path, from, &m, variant);
      }
    }
  }
  if (remember) {
    kmap_add(&l->exact, sig, siglen, strdup(path));
    if (kmap_find(&l->any_copy, e->digest, 32) == NULL) kmap_add(&l->any_copy, e->digest, 32, strdup(path));
  }
  free(sig);
  free_xattrs(&m);
}

static void set_xattr(const char *path, const char *ns, const char *what, const char *value) {
  char name[64];
  snprintf(name, sizeof name, "%s.overlay.%s", ns, what);
  if (lsetxattr(path, name, value, strlen(value), 0) != 0) fail_xattr(path, name, strlen(value));
}

static void read_digests(struct kmap *set, const char *hexes) {
  size_t n = strlen(hexes);
  if (n % 64 != 0) { fprintf(stderr, "fsmeta: bad digest list\n"); quit(); }
  for (size_t i = 0; i < n; i += 64) {
    char hex[65];
    unsigned char d[32];
    memcpy(hex, hexes + i, 64);
    hex[64] = '\0';
    if (parse_digest(hex, d) != 0) { fprintf(stderr, "fsmeta: bad digest list\n"); quit(); }
    if (kmap_find(set, d, 32) == NULL) kmap_add(set, d, 32, NULL);
  }
}

#define MANIFEST_HEADER "{\"mediaType\":\"application/vnd.minisandbox.layer.v1+jsonl\"}"

/* What the first pass leaves for the end: directories' metadata, in manifest order (applied in reverse: children first). */
struct dir_list {
  struct dir_meta *d;
  size_t n, cap;
};

/*
 * One pass over the manifest. The first checks every line (as node's reader and lay-out do) and
 * makes every entry that needs no object: directories, symlinks, devices, whiteouts; the lay-out
 * does that while the first frames are still being fetched and decoded, and a manifest is refused
 * before any file is written. The second places files and hardlinks, checking each again against
 * what the first saw (the file is the store's, read twice).
 */
static void lay_pass(struct lay *l, int pass, struct dir_list *dl) {
  FILE *f = fopen(l->manifest, "re");
  if (f == NULL) fail("open", l->manifest);
  static char fbuf[1 << 20];
  setvbuf(f, fbuf, _IOFBF, sizeof fbuf);
  char *line = NULL, *prev = NULL;
  size_t cap = 0, prev_cap = 0, prev_len = 0;
  ssize_t n;
  int last_had_newline = 1;
  lay_line = 0;
  while ((n = getline(&line, &cap, f)) > 0) {
    lay_line++;
    last_had_newline = line[n - 1] == '\n';
    if (!last_had_newline) break;
    size_t len = (size_t)n - 1;
    if (lay_line == 1) {
      if (len != strlen(MANIFEST_HEADER) || memcmp(line, MANIFEST_HEADER, len) != 0) bad_line("not the layer manifest header " MANIFEST_HEADER);
      continue;
    }
    struct entry e;
    parse_entry(line, line + len, &e);
    /* the second pass has only files and hardlinks to place */
    if (pass == 2 && e.type != T_FILE && e.type != T_HARDLINK) continue;
    char *path = cstr(&e.path);
    const char *slash = strrchr(path, '/');
    size_t plen = slash == NULL ? 0 : (size_t)(slash - path);
    if (pass == 2) {
      if (e.type == T_FILE) {
        /* exactly a file the first pass checked */
        if (kmap_find(&l->files, e.path.p, e.path.n) == NULL) bad_line("the manifest changed while it was laid out");
        place_file(l, &e, path);
      } else {
        if (kmap_find(&l->dirs, path, plen) == NULL || kmap_find(&l->files, e.target.p, e.target.n) == NULL) bad_line("the manifest changed while it was laid out");
        char *target = cstr(&e.target);
        if (link(target, path) != 0) fail("link", path);
        free(target);
      }
      free(path);
      continue;
    }
    /* strictly increasing byte-wise: sorted, no duplicates */
    size_t m = e.path.n < prev_len ? e.path.n : prev_len;
    int c = prev == NULL ? 1 : memcmp(e.path.p, prev, m);
    if (prev != NULL && (c < 0 || (c == 0 && e.path.n <= prev_len))) bad_line("entry out of order or duplicated");
    if (kmap_find(&l->dirs, path, plen) == NULL) unsafe(e.path.p, e.path.n, "its parent is not a directory of this layer (a path through a symlink or file?)");
    struct meta meta;
    switch (e.type) {
    case T_DIR: {
      if (mkdir(path, 0700) != 0) fail("mkdir", path);
      struct kv *k = kmap_add(&l->dirs, path, e.path.n, strdup(path));
      if (dl->n == dl->cap) {
        dl->cap = dl->cap ? dl->cap * 2 : 1024;
        dl->d = realloc(dl->d, dl->cap * sizeof *dl->d);
        if (dl->d == NULL) { fprintf(stderr, "fsmeta: out of memory\n"); quit(); }
      }
      meta_of(l, &e, &meta, NULL);
      free_xattrs(&meta); /* applied at the end, from a copy of their text */
      struct str x = { NULL, 0 };
      if (e.keys & K_XATTRS) x = (struct str){ cstr(&e.xattrs), e.xattrs.n };
      dl->d[dl->n++] = (struct dir_meta){ k->val, meta.uid, meta.gid, meta.mode, { meta.ts[0], meta.ts[1] }, e.opaque, x };
      break;
    }
    case T_FILE:
      kmap_add(&l->files, path, e.path.n, NULL);
      break;
    case T_HARDLINK:
      if (kmap_find(&l->files, e.target.p, e.target.n) == NULL) {
        char why[PATH_MAX + 64];
        snprintf(why, sizeof why, "hardlink target \"%.*s\" is not a file earlier in this layer", (int)e.target.n, e.target.p);
        unsafe(e.path.p, e.path.n, why);
      }
      break;
    case T_SYMLINK: {
      char *target = cstr(&e.target);
      if (symlink(target, path) != 0) fail("symlink", path);
      free(target);
      meta_of(l, &e, &meta, NULL);
      path_meta(path, &meta, 1);
      free_xattrs(&meta);
      break;
    }
    case T_FIFO:
    case T_CHAR:
    case T_BLOCK: {
      mode_t type = e.type == T_FIFO ? S_IFIFO : e.type == T_CHAR ? S_IFCHR : S_IFBLK;
      if (mknod(path, type | (mode_t)e.mode, makedev((unsigned)e.major, (unsigned)e.minor)) != 0) fail("mknod", path);
      meta_of(l, &e, &meta, NULL);
      path_meta(path, &meta, 0);
      free_xattrs(&meta);
      break;
    }
    case T_WHITEOUT:
      if (l->chardev_whiteouts) {
        if (mknod(path, S_IFCHR, makedev(0, 0)) != 0) fail("mknod", path);
      } else {
        /* kernel >= 6.7 xattr whiteouts: an empty file marked as such, in a dir marked to have them */
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || close(fd) != 0) fail("create", path);
        set_xattr(path, l->xattr_ns, "whiteout", "");
        char *parent = plen == 0 ? strdup(".") : strndup(path, plen);
        set_xattr(parent, l->xattr_ns, "opaque", "x");
        free(parent);
      }
      break;
    }
    free(path);
    if (prev_cap < e.path.n) {
      prev_cap = e.path.n * 2;
      prev = realloc(prev, prev_cap);
      if (prev == NULL) { fprintf(stderr, "fsmeta: out of memory\n"); quit(); }
    }
    memcpy(prev, e.path.p, e.path.n);
    prev_len = e.path.n;
  }
  if (ferror(f)) fail("read", l->manifest);
  if (!last_had_newline) {
    fprintf(stderr, "fsmeta: manifest: invalid\tline %ld: truncated manifest: no final newline\n", lay_line);
    quit();
  }
  if (lay_line == 0) {
    fprintf(stderr, "fsmeta: manifest: invalid\tline 1: empty manifest (no header line)\n");
    quit();
  }
  fclose(f);
  free(line);
  free(prev);
}

static void *lay_out(void *arg) {
  struct lay *l = arg;
  struct dir_list dl = { NULL, 0, 0 };
  kmap_add(&l->dirs, "", 0, NULL);
  lay_pass(l, 1, &dl);
  lay_pass(l, 2, &dl);
  for (size_t i = dl.n; i-- > 0;) {
    struct dir_meta *d = &dl.d[i];
    struct meta m = { .uid = d->uid, .gid = d->gid, .mode = d->mode, .ts = { d->ts[0], d->ts[1] } };
    if (d->xattrs.p != NULL) xattrs_into(&d->xattrs, &m);
    path_meta(d->path, &m, 0);
    free_xattrs(&m);
    free((char *)d->xattrs.p);
    if (d->opaque) set_xattr(d->path, l->xattr_ns, "opaque", "y");
  }
  free(dl.d);
  if (lchown(".", (uid_t)l->shift, (gid_t)l->shift) != 0) fail("chown", ".");
  if (chmod(".", 0755) != 0) fail("chmod", ".");
  return NULL;
}

static pthread_t lay_thread;
static int lay_started;

/* Y manifest shift whiteouts xattrns links tmpprefix expected repeated (the manifest came as the path field) */
static void start_lay_out(FILE *in, const char *manifest) {
  static struct lay l;
  if (lay_started) { fprintf(stderr, "fsmeta: a second Y record\n"); quit(); }
  if (getrandom(&hash_seed, sizeof hash_seed, 0) != sizeof hash_seed) hash_seed = (uint64_t)time(NULL) ^ (uint64_t)getpid();
  l.manifest = strdup(manifest);
  l.shift = strtoll(arg(in), NULL, 10);
  l.chardev_whiteouts = arg(in)[0] == 'c';
  l.xattr_ns = strdup(arg(in));
  l.links = strdup(arg(in));
  l.tmp_prefix = strdup(arg(in));
  read_digests(&l.staged, arg(in));
  read_digests(&l.repeated, arg(in));
  if (pthread_create(&lay_thread, NULL, lay_out, &l) != 0) { fprintf(stderr, "fsmeta: cannot start the lay-out thread\n"); quit(); }
  lay_started = 1;
}
