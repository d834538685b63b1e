/* SPDX-License-Identifier: MIT */
/* softmetal's library container: what newLibraryWithData:error: loads in
 * place of Apple's .metallib (which holds GPU code that cannot run on the
 * CPU), from the libdispatch data objects (sm_data.c) that carry it; and binary
 * archives (MTLBinaryArchive), with the pipeline descriptor they need
 * (at the end of this file).
 *
 * Container (little-endian), written by softmetal-metallib:
 *   bytes 0..7   "SMMTLLIB"
 *   u32          format version, 1
 *   u32          MTLMathMode the source is compiled with (Safe 0, Relaxed 1, Fast 2)
 *   u32          MTLLanguageVersion asked for (0: default; softmetal ignores it)
 *   u32          0
 *   u64          source length in bytes
 *   ...          the MSL source (UTF-8, no NUL)
 * It holds source, not machine code: loading it compiles the source as
 * newLibraryWithSource:options:error: does (softmetal's kernel cache makes a
 * second load cheap). Anything else gives nil and an NSError. */
#include "sm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { HEADER_SIZE = 32, FORMAT_VERSION = 1 };
static const char magic[8] = {'S', 'M', 'M', 'T', 'L', 'L', 'I', 'B'};

#define LIB_ERROR_DOMAIN "MTLLibraryErrorDomain"
enum { LIB_ERROR_UNSUPPORTED = 1 };

static uint32_t read_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t read_u64(const unsigned char *p) {
  return (uint64_t)read_u32(p) | (uint64_t)read_u32(p + 4) << 32;
}

static id fail(id *error, const char *sel, const char *why) {
  id e = sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_UNSUPPORTED, "%s: %s", sel, why);
  if (error)
    *error = sm__autorelease(e);
  else
    sm__release(e);
  return nil;
}

static id device_new_library_data(id self, SEL cmd, id data, id *error) {
  const char *sel = sel_getName(cmd);
  if (data == nil || !sm__is(data, &sm__dispatch_data_class))
    sm__fatal("-[SMDevice %s]: data is %s, not a dispatch_data_t", sel,
              data == nil ? "nil" : object_getClassName(data));
  const sm_dispatch_data *d = (const sm_dispatch_data *)data;
  const unsigned char *p = d->bytes;
  if (d->size >= 4 && memcmp(p, "MTLB", 4) == 0)
    return fail(error, sel,
                "this is an Apple metallib, whose GPU code cannot run on the CPU; "
                "make softmetal's container with softmetal-metallib");
  if (d->size < HEADER_SIZE || memcmp(p, magic, sizeof magic) != 0)
    return fail(error, sel, "the data is not a library (no SMMTLLIB header)");
  if (read_u32(p + 8) != FORMAT_VERSION)
    return fail(error, sel, "the library container has an unknown format version");
  const uint32_t math_mode = read_u32(p + 12);
  const uint64_t length = read_u64(p + 24);
  if (math_mode > 2) return fail(error, sel, "the library container's math mode is not 0, 1 or 2");
  if (length != d->size - HEADER_SIZE)
    return fail(error, sel, "the library container is truncated or has trailing bytes");
  char *text = malloc((size_t)length + 1);
  if (text == NULL) return fail(error, sel, "out of memory");
  memcpy(text, p + HEADER_SIZE, (size_t)length);
  text[length] = '\0';
  if (memchr(text, '\0', (size_t)length) != NULL) {
    free(text);
    return fail(error, sel, "the library container's source has a NUL byte");
  }
  id source = sm__string(text);
  free(text);
  if (source == nil) return fail(error, sel, "the library container's source is not UTF-8");
  /* The same path as source libraries, through our own messages. */
  Class options_class = objc_getClass("MTLCompileOptions");
  id options = ((id(*)(id, SEL))sm__lookup((id)options_class, "alloc"))((id)options_class,
                                                                        sel_registerName("alloc"));
  options = ((id(*)(id, SEL))sm__lookup(options, "init"))(options, sel_registerName("init"));
  ((void (*)(id, SEL, BOOL))(void (*)(void))sm__lookup(options, "setFastMathEnabled:"))(
      options, sel_registerName("setFastMathEnabled:"), math_mode != 0);
  if (math_mode != 0 && class_respondsToSelector(options_class, sel_registerName("setMathMode:")))
    ((void (*)(id, SEL, NSInteger))(void (*)(void))sm__lookup(options, "setMathMode:"))(
        options, sel_registerName("setMathMode:"), (NSInteger)math_mode);
  id library = ((id(*)(id, SEL, id, id, id *))(void (*)(void))sm__lookup(
      self, "newLibraryWithSource:options:error:"))(
      self, sel_registerName("newLibraryWithSource:options:error:"), source, options, error);
  sm__release(options);
  sm__release(source);
  return library;
}

/* ------------------------------------------------------------- binary archives */
/* An archive holds, for each function whose pipeline was added, the shared
 * object softmetal generated for it, its library's checked source (the
 * kernel cache's l- entry) and the compiler's --version output, each under
 * the SHA-256 of its key material (the source, the function, the math
 * mode, the compiler's identity and the code generator's sources), as the
 * kernel cache keeps them (sm_compile.h). While an archive that holds them
 * is alive in the process, newLibraryWithSource:options:error: and the
 * pipeline find them (sm__archive_restore) and run no compiler. A library
 * of another compiler or build has another key and is compiled, as Metal
 * recompiles for another GPU or OS.
 *
 * File (little-endian):
 *   bytes 0..7  "SMBINARC"
 *   u32         format version, 2
 *   u32         entry count
 *   entries     32-byte key, u32 kind (0 code, 1 compiler identity,
 *               2 checked library), u32 0, u64 size, size bytes (a shared
 *               object; --version text; the library entry)
 *   u64         FNV-1a of every byte before it
 * Anything else, or a checksum that does not match: nil and an NSError
 * (MTLBinaryArchiveErrorInvalidFile). The file holds code that softmetal
 * loads, so, as the kernel cache, one owned by another user or writable by
 * group or others is refused the same way. */
#define ARCHIVE_ERROR_DOMAIN "MTLBinaryArchiveDomain"
enum {
  ARCHIVE_ERROR_INVALID_FILE = 1,
  ARCHIVE_ERROR_COMPILATION_FAILURE = 3,
  ARCHIVE_ERROR_INTERNAL = 4,
  ARCHIVE_VERSION = 2,
  ARCHIVE_MAX_ENTRIES = 4096
};
enum { PIPELINE_OPTION_FAIL_ON_BINARY_ARCHIVE_MISS = 4 }; /* MTLPipelineOption */
static const char archive_magic[8] = {'S', 'M', 'B', 'I', 'N', 'A', 'R', 'C'};

typedef struct {
  unsigned char key[32];
  uint32_t kind;
  unsigned char *code;
  size_t size;
} archive_entry;

typedef struct sm_archive {
  sm_obj hdr;
  id device;
  archive_entry *e;
  size_t n;
  struct sm_archive *next; /* archives alive in the process */
} sm_archive;

/* Guards every archive's entries and the list of live archives. */
static pthread_mutex_t g_archive_lock = PTHREAD_MUTEX_INITIALIZER;
static sm_archive *g_archives;

static void archive_destroy(sm_obj *o) {
  sm_archive *a = (sm_archive *)o;
  pthread_mutex_lock(&g_archive_lock);
  for (sm_archive **p = &g_archives; *p; p = &(*p)->next)
    if (*p == a) {
      *p = a->next;
      break;
    }
  pthread_mutex_unlock(&g_archive_lock);
  for (size_t i = 0; i < a->n; i++) free(a->e[i].code);
  free(a->e);
  sm__release(a->device);
}
static sm_class archive_class = {"SMBinaryArchive", sizeof(sm_archive), archive_destroy, Nil, 0};

typedef struct {
  sm_obj hdr;
  id url;
} sm_archive_desc;
static void archive_desc_destroy(sm_obj *o) { sm__release(((sm_archive_desc *)o)->url); }
static sm_class archive_desc_class = {"MTLBinaryArchiveDescriptor", sizeof(sm_archive_desc),
                                      archive_desc_destroy, Nil, 0};

typedef struct {
  sm_obj hdr;
  id function;
  id archives; /* NSArray of archives, or nil */
} sm_pipeline_desc;
static void pipeline_desc_destroy(sm_obj *o) {
  sm_pipeline_desc *d = (sm_pipeline_desc *)o;
  sm__release(d->function);
  sm__release(d->archives);
}
static sm_class pipeline_desc_class = {"MTLComputePipelineDescriptor", sizeof(sm_pipeline_desc),
                                       pipeline_desc_destroy, Nil, 0};

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
static const uint64_t FNV_BASIS = 0xcbf29ce484222325ull;

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  put_u32(p, (uint32_t)v);
  put_u32(p + 4, (uint32_t)(v >> 32));
}

static void set_error(id *error, id e) {
  if (error)
    *error = sm__autorelease(e);
  else
    sm__release(e);
}

/* Reads a whole file; NULL with errno set on failure. */
static unsigned char *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      size_t ncap = cap ? cap * 2 : 65536;
      unsigned char *p = realloc(buf, ncap);
      if (!p) {
        free(buf);
        fclose(f);
        errno = ENOMEM;
        return NULL;
      }
      buf = p;
      cap = ncap;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    errno = EIO;
    return NULL;
  }
  *size = n;
  return buf;
}

/* Writes bytes to path through a new file renamed over it. */
static bool write_atomic(const char *path, const void *bytes, size_t n) {
  static atomic_uint counter;
  size_t len = strlen(path) + 64;
  char *tmp = malloc(len);
  if (!tmp) return false;
  snprintf(tmp, len, "%s.tmp-%d-%u", path, (int)getpid(), atomic_fetch_add(&counter, 1));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (!f) {
    int e = errno;
    if (fd >= 0) close(fd);
    free(tmp);
    errno = e;
    return false;
  }
  bool ok = fwrite(bytes, 1, n, f) == n;
  ok = fclose(f) == 0 && ok;
  int e = errno;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) {
    e = errno ? errno : e;
    unlink(tmp);
  }
  free(tmp);
  errno = e;
  return ok;
}

/* Parses the file's bytes into a's entries; false for anything malformed. */
static bool archive_parse(sm_archive *a, const unsigned char *p, size_t size) {
  if (size < 24 || memcmp(p, archive_magic, 8) != 0 || read_u32(p + 8) != ARCHIVE_VERSION)
    return false;
  if (read_u64(p + size - 8) != fnv1a(FNV_BASIS, p, size - 8)) return false;
  uint32_t count = read_u32(p + 12);
  if (count > ARCHIVE_MAX_ENTRIES) return false;
  size_t at = 16, end = size - 8;
  a->e = calloc(count ? count : 1, sizeof *a->e);
  if (!a->e) return false;
  for (uint32_t i = 0; i < count; i++) {
    if (end - at < 48) return false;
    uint64_t n = read_u64(p + at + 40);
    uint32_t kind = read_u32(p + at + 32);
    if (kind > SM_ARCHIVE_LIBRARY || read_u32(p + at + 36) != 0 || n == 0 || n > end - at - 48)
      return false;
    unsigned char *code = malloc((size_t)n);
    if (!code) return false;
    archive_entry *e = &a->e[a->n++];
    memcpy(e->key, p + at, 32);
    e->kind = kind;
    e->code = code;
    e->size = (size_t)n;
    at += 48;
    memcpy(code, p + at, (size_t)n);
    at += (size_t)n;
  }
  return at == end;
}

static id device_new_archive(id self, SEL cmd, id descriptor, id *error) {
  const char *sel = sel_getName(cmd);
  if (!sm__is(descriptor, &archive_desc_class))
    sm__fatal("-[SMDevice %s]: descriptor is %s, not an MTLBinaryArchiveDescriptor", sel,
              descriptor ? object_getClassName(descriptor) : "nil");
  sm_archive *a = sm__new(&archive_class);
  if (!a) return nil;
  a->device = sm__retain(self);
  id url = ((sm_archive_desc *)descriptor)->url;
  if (url) {
    const char *path = sm__string_utf8(((sm_url *)url)->path);
    struct stat st;
    const char *unsafe = stat(path, &st) != 0      ? NULL
                         : st.st_uid != geteuid()  ? "is owned by another user"
                         : (st.st_mode & 022) != 0 ? "is writable by group or others"
                                                   : NULL;
    size_t size = 0;
    unsigned char *bytes = unsafe ? NULL : read_all(path, &size);
    bool ok = bytes && archive_parse(a, bytes, size);
    int e = errno;
    free(bytes);
    if (!ok) {
      set_error(error,
                sm__error(ARCHIVE_ERROR_DOMAIN, ARCHIVE_ERROR_INVALID_FILE, "%s: %s: %s", sel, path,
                          unsafe          ? unsafe
                          : bytes || size ? "not a softmetal binary archive (bad header, "
                                            "checksum or entries)"
                                          : strerror(e)));
      sm__release((id)a);
      return nil;
    }
  }
  pthread_mutex_lock(&g_archive_lock);
  a->next = g_archives;
  g_archives = a;
  pthread_mutex_unlock(&g_archive_lock);
  return (id)a;
}

/* sm__archive_restore_hook: see sm_internal.h. */
static bool archive_restore(uint32_t kind, const unsigned char key[32], const char *path) {
  bool done = false;
  pthread_mutex_lock(&g_archive_lock);
  for (sm_archive *a = g_archives; a && !done; a = a->next)
    for (size_t i = 0; i < a->n && !done; i++)
      if (memcmp(a->e[i].key, key, 32) == 0 && a->e[i].kind == kind) {
        done = write_atomic(path, a->e[i].code, a->e[i].size);
        if (done && kind == SM_ARCHIVE_CODE) atomic_fetch_add(&sm__archive_restores, 1);
      }
  pthread_mutex_unlock(&g_archive_lock);
  return done;
}

static bool archive_has(sm_archive *a, uint32_t kind, const unsigned char key[32]) {
  for (size_t i = 0; i < a->n; i++)
    if (memcmp(a->e[i].key, key, 32) == 0 && a->e[i].kind == kind) return true;
  return false;
}

/* Adds the file of kind and key at path unless the archive has it. */
static bool archive_add_file(sm_archive *a, uint32_t kind, const unsigned char key[32],
                             const char *path, const char *sel, id *error) {
  pthread_mutex_lock(&g_archive_lock);
  bool have = archive_has(a, kind, key);
  pthread_mutex_unlock(&g_archive_lock);
  if (have) return true;
  size_t size = 0;
  unsigned char *code = read_all(path, &size);
  if (!code || size == 0) {
    int e = errno;
    free(code);
    set_error(error, sm__error(ARCHIVE_ERROR_DOMAIN, ARCHIVE_ERROR_COMPILATION_FAILURE,
                               "%s: cannot read %s (%s)", sel, path, code ? "empty" : strerror(e)));
    return false;
  }
  pthread_mutex_lock(&g_archive_lock);
  archive_entry *e = archive_has(a, kind, key) || a->n >= ARCHIVE_MAX_ENTRIES
                         ? NULL
                         : realloc(a->e, (a->n + 1) * sizeof *a->e);
  if (e) {
    a->e = e;
    archive_entry *x = &a->e[a->n++];
    memcpy(x->key, key, 32);
    x->kind = kind;
    x->code = code;
    x->size = size;
    code = NULL;
  }
  pthread_mutex_unlock(&g_archive_lock);
  free(code);
  return true;
}

static NSUInteger array_n(id array) {
  return ((NSUInteger(*)(id, SEL))(void (*)(void))sm__lookup(array, "count"))(
      array, sel_registerName("count"));
}
static id array_at(id array, NSUInteger i) {
  return ((id(*)(id, SEL, NSUInteger))(void (*)(void))sm__lookup(array, "objectAtIndex:"))(
      array, sel_registerName("objectAtIndex:"), i);
}

static sm_pipeline_desc *pipeline_desc(id o, const char *cls, const char *sel) {
  if (!sm__is(o, &pipeline_desc_class))
    sm__fatal("-[%s %s]: descriptor is %s, not an MTLComputePipelineDescriptor", cls, sel,
              o ? object_getClassName(o) : "nil");
  sm_pipeline_desc *d = (sm_pipeline_desc *)o;
  if (!d->function) sm__fatal("-[%s %s]: the descriptor has no computeFunction", cls, sel);
  return d;
}

static BOOL archive_add_compute(id self, SEL cmd, id descriptor, id *error) {
  const char *sel = sel_getName(cmd);
  sm_pipeline_desc *d = pipeline_desc(descriptor, "SMBinaryArchive", sel);
  sm_archive *a = (sm_archive *)self;
  char *diag = NULL;
  const sm_code *code = sm__function_code(d->function, &diag);
  if (!code) {
    set_error(error,
              sm__error(ARCHIVE_ERROR_DOMAIN, ARCHIVE_ERROR_COMPILATION_FAILURE,
                        "%s: cannot generate the function's code: %s", sel, diag ? diag : "?"));
    free(diag);
    return NO;
  }
  return archive_add_file(a, SM_ARCHIVE_COMPILER, code->compiler_key, code->compiler_path, sel,
                          error) &&
                 archive_add_file(a, SM_ARCHIVE_LIBRARY, code->library_key, code->library_path, sel,
                                  error) &&
                 archive_add_file(a, SM_ARCHIVE_CODE, code->key, code->path, sel, error)
             ? YES
             : NO;
}

static BOOL archive_serialize(id self, SEL cmd, id url, id *error) {
  const char *sel = sel_getName(cmd);
  if (!sm__is(url, &sm__url_class))
    sm__fatal("-[SMBinaryArchive %s]: url is %s, not a file NSURL", sel,
              url ? object_getClassName(url) : "nil");
  const char *path = sm__string_utf8(((sm_url *)url)->path);
  sm_archive *a = (sm_archive *)self;
  pthread_mutex_lock(&g_archive_lock);
  size_t size = 16 + 8;
  for (size_t i = 0; i < a->n; i++) size += 48 + a->e[i].size;
  unsigned char *buf = malloc(size);
  if (buf) {
    memcpy(buf, archive_magic, 8);
    put_u32(buf + 8, ARCHIVE_VERSION);
    put_u32(buf + 12, (uint32_t)a->n);
    size_t at = 16;
    for (size_t i = 0; i < a->n; i++) {
      memcpy(buf + at, a->e[i].key, 32);
      put_u32(buf + at + 32, a->e[i].kind);
      put_u32(buf + at + 36, 0);
      put_u64(buf + at + 40, a->e[i].size);
      memcpy(buf + at + 48, a->e[i].code, a->e[i].size);
      at += 48 + a->e[i].size;
    }
    put_u64(buf + at, fnv1a(FNV_BASIS, buf, at));
  }
  pthread_mutex_unlock(&g_archive_lock);
  bool ok = buf && write_atomic(path, buf, size);
  int e = buf ? errno : ENOMEM;
  free(buf);
  if (!ok) {
    set_error(error, sm__error(ARCHIVE_ERROR_DOMAIN, ARCHIVE_ERROR_INTERNAL,
                               "%s: cannot write %s (%s)", sel, path, strerror(e)));
    return NO;
  }
  return YES;
}

static id archive_device(id self, SEL cmd) {
  (void)cmd;
  return ((sm_archive *)self)->device;
}

static void archive_desc_set_url(id self, SEL cmd, id url) {
  if (url && !sm__is(url, &sm__url_class))
    sm__fatal("-[MTLBinaryArchiveDescriptor %s]: url is %s, not an NSURL", sel_getName(cmd),
              object_getClassName(url));
  sm_archive_desc *d = (sm_archive_desc *)self;
  id old = d->url;
  d->url = url ? sm__retain(url) : nil;
  if (old) sm__release(old);
}
static id archive_desc_url(id self, SEL cmd) {
  (void)cmd;
  return ((sm_archive_desc *)self)->url;
}

static void pipeline_desc_set_function(id self, SEL cmd, id function) {
  (void)cmd;
  sm_pipeline_desc *d = (sm_pipeline_desc *)self;
  id old = d->function;
  d->function = function ? sm__retain(function) : nil;
  if (old) sm__release(old);
}
static id pipeline_desc_function(id self, SEL cmd) {
  (void)cmd;
  return ((sm_pipeline_desc *)self)->function;
}
static void pipeline_desc_set_archives(id self, SEL cmd, id archives) {
  if (archives) {
    if (!sm__is(archives, &sm__array_class))
      sm__fatal("-[MTLComputePipelineDescriptor %s]: binaryArchives is %s, not an NSArray",
                sel_getName(cmd), object_getClassName(archives));
    NSUInteger n = array_n(archives);
    for (NSUInteger i = 0; i < n; i++) {
      id o = array_at(archives, i);
      if (!sm__is(o, &archive_class))
        sm__fatal("-[MTLComputePipelineDescriptor %s]: binaryArchives[%lu] is %s, not an "
                  "MTLBinaryArchive",
                  sel_getName(cmd), i, object_getClassName(o));
    }
  }
  sm_pipeline_desc *d = (sm_pipeline_desc *)self;
  id old = d->archives;
  d->archives = archives ? sm__retain(archives) : nil;
  if (old) sm__release(old);
}
static id pipeline_desc_archives(id self, SEL cmd) {
  (void)cmd;
  return ((sm_pipeline_desc *)self)->archives;
}

/* The descriptor's pipeline, as newComputePipelineStateWithFunction:error:
 * makes it, with its reflection (sm_reflect.c) when asked for.
 * FailOnBinaryArchiveMiss: nil unless one of the binaryArchives holds the
 * function's code. */
static id device_new_pipeline_desc(id self, SEL cmd, id descriptor, NSUInteger options,
                                   id *reflection, id *error) {
  const char *sel = sel_getName(cmd);
  sm_pipeline_desc *d = pipeline_desc(descriptor, "SMDevice", sel);
  (void)sm__reflect_into(nil, options, reflection, sel); /* checks options; nil until made */
  if (options & PIPELINE_OPTION_FAIL_ON_BINARY_ARCHIVE_MISS) {
    unsigned char key[32];
    bool hit = false;
    if (d->archives && sm__function_code_key(d->function, key)) {
      NSUInteger n = array_n(d->archives);
      pthread_mutex_lock(&g_archive_lock);
      for (NSUInteger i = 0; i < n && !hit; i++) {
        id o = array_at(d->archives, i);
        hit = archive_has((sm_archive *)o, SM_ARCHIVE_CODE, key);
      }
      pthread_mutex_unlock(&g_archive_lock);
    }
    if (!hit) {
      set_error(error, sm__error(ARCHIVE_ERROR_DOMAIN, ARCHIVE_ERROR_COMPILATION_FAILURE,
                                 "%s: MTLPipelineOptionFailOnBinaryArchiveMiss: no binary "
                                 "archive of the descriptor holds the function's code",
                                 sel));
      return nil;
    }
  }
  id p = ((id(*)(id, SEL, id, id *))(void (*)(void))sm__lookup(
      self, "newComputePipelineStateWithFunction:error:"))(
      self, sel_registerName("newComputePipelineStateWithFunction:error:"), d->function, error);
  if (!sm__reflect_into(p, options, reflection, sel)) {
    sm__release(p);
    return nil;
  }
  if (p && ((sm_obj *)descriptor)->label) { /* the descriptor's label names the pipeline */
    id old = ((sm_obj *)p)->label;
    ((sm_obj *)p)->label = sm__string_copy(((sm_obj *)descriptor)->label);
    if (old) sm__release(old);
  }
  return p;
}

const sm_method_def sm__device_archive_methods[] = {
    SM_METHOD("newLibraryWithData:error:", device_new_library_data, "@@:@^@"),
    SM_METHOD("newBinaryArchiveWithDescriptor:error:", device_new_archive, "@@:@^@"),
    SM_METHOD("newComputePipelineStateWithDescriptor:options:reflection:error:",
              device_new_pipeline_desc, "@@:@Q^@^@"),
    {NULL, NULL, NULL},
};

static const sm_method_def archive_desc_methods[] = {
    SM_METHOD("setUrl:", archive_desc_set_url, "v@:@"),
    SM_METHOD("url", archive_desc_url, "@@:"),
    {NULL, NULL, NULL},
};

static const sm_method_def archive_methods[] = {
    SM_METHOD("addComputePipelineFunctionsWithDescriptor:error:", archive_add_compute, "C@:@^@"),
    SM_METHOD("serializeToURL:error:", archive_serialize, "C@:@^@"),
    SM_METHOD("device", archive_device, "@@:"),
    {NULL, NULL, NULL},
};

static const sm_method_def pipeline_desc_methods[] = {
    SM_METHOD("setComputeFunction:", pipeline_desc_set_function, "v@:@"),
    SM_METHOD("computeFunction", pipeline_desc_function, "@@:"),
    SM_METHOD("setBinaryArchives:", pipeline_desc_set_archives, "v@:@"),
    SM_METHOD("binaryArchives", pipeline_desc_archives, "@@:"),
    {NULL, NULL, NULL},
};

void sm__register_archive(void) {
  sm__archive_restore_hook = archive_restore;
  SM_CLASS_DEFINE(&archive_desc_class, Nil, archive_desc_methods);
  SM_CLASS_DEFINE(&archive_class, Nil, archive_methods);
  SM_CLASS_DEFINE(&pipeline_desc_class, Nil, pipeline_desc_methods);
  sm__register_reflect();
}
