/* softmetal object model and Foundation subset: root class, refcounting,
 * autorelease pools, NSString, NSError, NSArray, blocks, unknown selectors. */
#include "sm_internal.h"
#include "sm_compile.h"

#include <Block.h>
#include <objc/thr.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------- counters */
static atomic_long g_allocs, g_deallocs, g_retains, g_releases, g_autoreleases;
atomic_long sm__buffer_bytes, sm__compiles, sm__cache_hits, sm__unsafe_math_libraries,
    sm__archive_restores;
atomic_long sm__blocked_cmdbuf;

enum { SM_MAX_CLASSES = 32 };
static sm_class *g_classes[SM_MAX_CLASSES];
static int g_nclasses;
static Class g_root;

_Noreturn void sm__fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("softmetal: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
  abort();
}

SM_EXPORT void softmetal_stats(struct softmetal_stats *out) {
  long live = 0;
  for (int i = 0; i < g_nclasses; i++) live += atomic_load(&g_classes[i]->live);
  out->live_objects = live;
  out->allocs = atomic_load(&g_allocs);
  out->deallocs = atomic_load(&g_deallocs);
  out->retains = atomic_load(&g_retains);
  out->releases = atomic_load(&g_releases);
  out->autoreleases = atomic_load(&g_autoreleases);
  out->live_buffer_bytes = atomic_load(&sm__buffer_bytes);
  out->kernel_compiles = atomic_load(&sm__compiles);
  out->kernel_cache_hits = atomic_load(&sm__cache_hits);
  out->archive_restores = atomic_load(&sm__archive_restores);
  out->syntax_checks = atomic_load(&sm__syntax_checks);
  out->function_compiles = atomic_load(&sm__function_compiles);
  out->function_cache_hits = atomic_load(&sm__function_cache_hits);
  out->unsafe_math_libraries = atomic_load(&sm__unsafe_math_libraries);
  out->blocked_in_command_buffer = atomic_load(&sm__blocked_cmdbuf);
}

SM_EXPORT long softmetal_live_count(const char *class_name) {
  for (int i = 0; i < g_nclasses; i++)
    if (class_name && strcmp(g_classes[i]->name, class_name) == 0)
      return atomic_load(&g_classes[i]->live);
  return -1;
}

/* ------------------------------------------------------------- classes */
void sm__method(Class c, const char *sel, IMP imp, const char *types) {
  if (!class_addMethod(c, sel_registerName(sel), imp, types))
    sm__fatal("cannot add method %s to %s", sel, class_getName(c));
}

void sm__class_method(Class c, const char *sel, IMP imp, const char *types) {
  sm__method(object_getClass((id)c), sel, imp, types);
}

Class sm__class_begin(sm_class *k) {
  if (g_nclasses == SM_MAX_CLASSES) sm__fatal("too many classes");
  Class c = objc_allocateClassPair(g_root, k->name, 0);
  if (!c) sm__fatal("class %s already exists in this process", k->name);
  k->objc = c;
  g_classes[g_nclasses++] = k;
  return c;
}

void sm__class_end(sm_class *k) { objc_registerClassPair(k->objc); }

static sm_class *class_info(Class c) {
  for (int i = 0; i < g_nclasses; i++)
    if (g_classes[i]->objc == c) return g_classes[i];
  return NULL;
}

void *sm__new(sm_class *k) {
  sm_obj *o = calloc(1, k->size);
  if (!o) return NULL;
  o->isa = k->objc;
  o->cls = k;
  atomic_init(&o->rc, 1);
  atomic_fetch_add(&k->live, 1);
  atomic_fetch_add(&g_allocs, 1);
  return o;
}

bool sm__is(id o, const sm_class *k) { return o && ((sm_obj *)o)->cls == k; }

/* ------------------------------------------------------------- root methods */
static id root_alloc(id cls, SEL cmd) {
  sm_class *k = class_info((Class)cls);
  if (!k) sm__fatal("+[%s %s]: not a softmetal class", class_getName((Class)cls),
                    sel_getName(cmd));
  return sm__new(k);
}

static id root_init(id self, SEL cmd) { (void)cmd; return self; }

id sm__retain(id o) {
  if (!o) return o;
  sm_obj *s = (sm_obj *)o;
  long old = atomic_fetch_add(&s->rc, 1);
  if (old <= 0) sm__fatal("-[%s retain]: object already deallocated", s->cls->name);
  atomic_fetch_add(&g_retains, 1);
  return o;
}

void sm__release(id o) {
  if (!o) return;
  sm_obj *s = (sm_obj *)o;
  atomic_fetch_add(&g_releases, 1);
  long old = atomic_fetch_sub(&s->rc, 1);
  if (old <= 0) sm__fatal("-[%s release]: over-release (retain count was %ld)",
                          s->cls->name, old);
  if (old == 1) {
    void (*dealloc)(id, SEL) = (void (*)(id, SEL))(void (*)(void))sm__lookup(o, "dealloc");
    dealloc(o, sel_registerName("dealloc"));
  }
}

static id root_retain(id self, SEL cmd) { (void)cmd; return sm__retain(self); }
static void root_release(id self, SEL cmd) { (void)cmd; sm__release(self); }
static id root_autorelease(id self, SEL cmd) { (void)cmd; return sm__autorelease(self); }
static NSUInteger root_retain_count(id self, SEL cmd) {
  (void)cmd;
  return (NSUInteger)atomic_load(&((sm_obj *)self)->rc);
}

static void root_dealloc(id self, SEL cmd) {
  (void)cmd;
  sm_obj *s = (sm_obj *)self;
  sm_class *k = (sm_class *)s->cls;
  if (k->destroy) k->destroy(s);
  sm__release(s->label);
  atomic_fetch_sub(&k->live, 1);
  atomic_fetch_add(&g_deallocs, 1);
  free(s);
}

static Class root_class(id self, SEL cmd) { (void)cmd; return object_getClass(self); }
static BOOL root_responds(id self, SEL cmd, SEL sel) {
  (void)cmd;
  return class_respondsToSelector(object_getClass(self), sel) ? 1 : 0;
}
static BOOL root_is_kind(id self, SEL cmd, Class c) {
  (void)cmd;
  for (Class k = object_getClass(self); k; k = class_getSuperclass(k))
    if (k == c) return 1;
  return 0;
}

static id root_label(id self, SEL cmd) { (void)cmd; return ((sm_obj *)self)->label; }
static void root_set_label(id self, SEL cmd, id label) {
  sm_obj *s = (sm_obj *)self;
  if (label && !sm__is(label, &sm__string_class))
    sm__fatal("-[%s %s]: label is a %s, not an NSString", s->cls->name, sel_getName(cmd),
              object_getClassName(label));
  sm__retain(label);
  sm__release(s->label);
  s->label = label;
}

/* Class objects are never counted or freed. */
static id class_retain(id self, SEL cmd) { (void)cmd; return self; }
static void class_release(id self, SEL cmd) { (void)self; (void)cmd; }

/* ------------------------------------------------------------- unknown selectors */
static void unknown_selector(id self, SEL cmd) {
  Class c = self ? object_getClass(self) : Nil;
  const char *kind = c && class_isMetaClass(c) ? "+" : "-";
  const char *name = self ? object_getClassName(self) : "nil";
  sm__fatal("%s[%s %s]: unrecognized selector sent to %p", kind, name,
            sel_getName(cmd), (void *)self);
}

static IMP forward_hook(id receiver, SEL sel) {
  (void)receiver;
  (void)sel;
  return SM_IMP(unknown_selector);
}

/* ------------------------------------------------------------- autorelease pools */
typedef struct {
  id *items;
  size_t n, cap;
  size_t *marks;
  size_t depth, mark_cap;
} pool_stack;

static _Thread_local pool_stack t_pools;
static pthread_key_t g_pool_key;

static void pool_thread_exit(void *arg) {
  pool_stack *p = arg;
  if (p->depth)
    fprintf(stderr, "softmetal: thread exited with %zu autorelease pool(s) not popped\n",
            p->depth);
  free(p->items);
  free(p->marks);
  memset(p, 0, sizeof *p);
}

void *sm__pool_push(void) {
  pool_stack *p = &t_pools;
  if (p->depth == p->mark_cap) {
    size_t cap = p->mark_cap ? p->mark_cap * 2 : 16;
    size_t *m = realloc(p->marks, cap * sizeof *m);
    if (!m) sm__fatal("objc_autoreleasePoolPush: out of memory");
    p->marks = m;
    p->mark_cap = cap;
    pthread_setspecific(g_pool_key, p);
  }
  p->marks[p->depth++] = p->n;
  return (void *)(uintptr_t)(p->depth * 16);
}

void sm__pool_pop(void *token) {
  pool_stack *p = &t_pools;
  uintptr_t t = (uintptr_t)token;
  if (t == 0 || t % 16 != 0 || t / 16 > p->depth)
    sm__fatal("objc_autoreleasePoolPop: token %p is not a pool pushed on this "
              "thread (pool depth %zu)", token, p->depth);
  size_t d = t / 16 - 1;
  size_t mark = p->marks[d];
  /* Releasing may autorelease more objects; drain until this level is empty. */
  while (p->n > mark) {
    id o = p->items[--p->n];
    sm__release(o);
  }
  p->depth = d;
}

id sm__autorelease(id o) {
  if (!o) return o;
  pool_stack *p = &t_pools;
  if (p->depth == 0)
    sm__fatal("-[%s autorelease]: no autorelease pool in place on this thread "
              "(the object would leak)", ((sm_obj *)o)->cls->name);
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    id *items = realloc(p->items, cap * sizeof *items);
    if (!items) sm__fatal("-[%s autorelease]: out of memory", ((sm_obj *)o)->cls->name);
    p->items = items;
    p->cap = cap;
  }
  p->items[p->n++] = o;
  atomic_fetch_add(&g_autoreleases, 1);
  return o;
}

SM_EXPORT void *objc_autoreleasePoolPush(void) { return sm__pool_push(); }
SM_EXPORT void objc_autoreleasePoolPop(void *token) { sm__pool_pop(token); }

/* ------------------------------------------------------------- NSString */
typedef struct {
  sm_obj hdr;
  char *bytes; /* NUL-terminated UTF-8 */
  size_t len;  /* bytes, without the NUL */
  NSUInteger utf16_len;
} sm_string;

static void string_destroy(sm_obj *o) { free(((sm_string *)o)->bytes); }
sm_class sm__string_class = {"NSString", sizeof(sm_string), string_destroy, Nil, 0};

enum { NS_ASCII = 1, NS_UTF8 = 4 };

/* UTF-16 length of valid UTF-8, or -1 when invalid. */
static long utf8_utf16_length(const unsigned char *s, size_t n) {
  long units = 0;
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t extra;
    unsigned cp;
    if (c < 0x80) { extra = 0; cp = c; }
    else if ((c & 0xE0) == 0xC0) { extra = 1; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { extra = 2; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { extra = 3; cp = c & 0x07; }
    else return -1;
    if (extra && i + extra >= n) return -1;
    for (size_t k = 1; k <= extra; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return -1;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static const unsigned min_cp[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    units += cp >= 0x10000 ? 2 : 1;
    i += extra + 1;
  }
  return units;
}

/* Fills an allocated string; on invalid input releases it and returns nil. */
static id string_fill(sm_string *s, const void *bytes, size_t len, NSUInteger enc) {
  if (!s) return nil;
  long units = -1;
  if (bytes || len == 0) {
    if (enc == NS_UTF8) {
      units = utf8_utf16_length(bytes, len);
    } else if (enc == NS_ASCII) {
      units = (long)len;
      for (size_t i = 0; i < len; i++)
        if (((const unsigned char *)bytes)[i] >= 0x80) units = -1;
    }
  }
  if (units >= 0 && memchr(bytes ? bytes : "", 0, len)) units = -1; /* no NULs inside */
  if (units < 0 || !(s->bytes = malloc(len + 1))) {
    sm__release((id)s);
    return nil;
  }
  if (len) memcpy(s->bytes, bytes, len);
  s->bytes[len] = 0;
  s->len = len;
  s->utf16_len = (NSUInteger)units;
  return (id)s;
}

static id string_init_bytes(id self, SEL cmd, const void *bytes, NSUInteger len,
                            NSUInteger enc) {
  (void)cmd;
  return string_fill((sm_string *)self, bytes, len, enc);
}

static id string_with_cstring(id cls, SEL cmd, const char *cstr, NSUInteger enc) {
  (void)cls;
  (void)cmd;
  if (!cstr) return nil;
  id s = string_fill(sm__new(&sm__string_class), cstr, strlen(cstr), enc);
  return sm__autorelease(s);
}

static const char *string_utf8(id self, SEL cmd) { (void)cmd; return ((sm_string *)self)->bytes; }
static NSUInteger string_length(id self, SEL cmd) { (void)cmd; return ((sm_string *)self)->utf16_len; }
static BOOL string_is_equal(id self, SEL cmd, id other) {
  (void)cmd;
  if (!sm__is(other, &sm__string_class)) return 0;
  return strcmp(((sm_string *)self)->bytes, ((sm_string *)other)->bytes) == 0;
}

id sm__string(const char *utf8) {
  return string_fill(sm__new(&sm__string_class), utf8, strlen(utf8), NS_UTF8);
}

const char *sm__string_utf8(id s) {
  if (!s) return NULL;
  if (!sm__is(s, &sm__string_class))
    sm__fatal("expected an NSString, got a %s", object_getClassName(s));
  return ((sm_string *)s)->bytes;
}

/* ------------------------------------------------------------- NSError */
typedef struct {
  sm_obj hdr;
  id domain, description;
  NSInteger code;
} sm_error;

static void error_destroy(sm_obj *o) {
  sm_error *e = (sm_error *)o;
  sm__release(e->domain);
  sm__release(e->description);
}
sm_class sm__error_class = {"NSError", sizeof(sm_error), error_destroy, Nil, 0};

id sm__error(const char *domain, NSInteger code, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  char *text = small;
  if (n >= (int)sizeof small) {
    text = malloc((size_t)n + 1);
    if (!text) return nil;
    va_start(ap, fmt);
    vsnprintf(text, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  sm_error *e = sm__new(&sm__error_class);
  if (e) {
    e->domain = sm__string(domain);
    e->description = sm__string(text);
    e->code = code;
    if (!e->description) e->description = sm__string("(message was not valid UTF-8)");
  }
  if (text != small) free(text);
  return (id)e;
}

static id error_domain(id self, SEL cmd) { (void)cmd; return ((sm_error *)self)->domain; }
static NSInteger error_code(id self, SEL cmd) { (void)cmd; return ((sm_error *)self)->code; }
static id error_description(id self, SEL cmd) {
  (void)cmd;
  return ((sm_error *)self)->description;
}

/* ------------------------------------------------------------- NSArray */
typedef struct {
  sm_obj hdr;
  id *items;
  NSUInteger n;
} sm_array;

static void array_destroy(sm_obj *o) {
  sm_array *a = (sm_array *)o;
  for (NSUInteger i = 0; i < a->n; i++) sm__release(a->items[i]);
  free(a->items);
}
sm_class sm__array_class = {"NSArray", sizeof(sm_array), array_destroy, Nil, 0};

id sm__array(id *items, size_t n) {
  sm_array *a = sm__new(&sm__array_class);
  if (!a) return nil;
  a->items = calloc(n ? n : 1, sizeof(id));
  if (!a->items) {
    sm__release((id)a);
    return nil;
  }
  for (size_t i = 0; i < n; i++) a->items[i] = sm__retain(items[i]);
  a->n = n;
  return (id)a;
}

static NSUInteger array_count(id self, SEL cmd) { (void)cmd; return ((sm_array *)self)->n; }
static id array_object_at(id self, SEL cmd, NSUInteger i) {
  sm_array *a = (sm_array *)self;
  if (i >= a->n)
    sm__fatal("-[NSArray %s]: index %lu beyond bounds (count %lu)", sel_getName(cmd), i,
              a->n);
  return a->items[i];
}

/* ------------------------------------------------------------- blocks */
typedef struct {
  void *isa;
  int flags;
  int reserved;
  void (*invoke)(void);
  const void *descriptor;
} block_layout;

void *sm__block_copy(const void *block) { return block ? _Block_copy(block) : NULL; }
void sm__block_release(const void *block) {
  if (block) _Block_release(block);
}

void sm__block_invoke_dealloc(const void *block, void *ptr, NSUInteger len) {
  const block_layout *b = block;
  void (*fn)(const void *, void *, NSUInteger) =
      (void (*)(const void *, void *, NSUInteger))b->invoke;
  fn(block, ptr, len);
}

void sm__block_invoke_handler(const void *block, id arg) {
  const block_layout *b = block;
  void (*fn)(const void *, id) = (void (*)(const void *, id))b->invoke;
  fn(block, arg);
}

/* ------------------------------------------------------------- registration */
static void register_foundation(void) {
  g_root = objc_allocateClassPair(Nil, "SMObject", 0);
  if (!g_root) sm__fatal("class SMObject already exists in this process");
  class_addIvar(g_root, "isa", sizeof(Class), 3, "#");
  class_addIvar(g_root, "_sm_cls", sizeof(void *), 3, "^v");
  class_addIvar(g_root, "_sm_rc", sizeof(long), 3, "q");
  class_addIvar(g_root, "_sm_label", sizeof(id), 3, "@");
  sm__class_method(g_root, "alloc", SM_IMP(root_alloc), "@@:");
  sm__class_method(g_root, "retain", SM_IMP(class_retain), "@@:");
  sm__class_method(g_root, "release", SM_IMP(class_release), "v@:");
  sm__class_method(g_root, "autorelease", SM_IMP(class_retain), "@@:");
  sm__method(g_root, "init", SM_IMP(root_init), "@@:");
  sm__method(g_root, "retain", SM_IMP(root_retain), "@@:");
  sm__method(g_root, "release", SM_IMP(root_release), "v@:");
  sm__method(g_root, "autorelease", SM_IMP(root_autorelease), "@@:");
  sm__method(g_root, "retainCount", SM_IMP(root_retain_count), "Q@:");
  sm__method(g_root, "dealloc", SM_IMP(root_dealloc), "v@:");
  sm__method(g_root, "class", SM_IMP(root_class), "#@:");
  sm__method(g_root, "respondsToSelector:", SM_IMP(root_responds), "C@::");
  sm__method(g_root, "isKindOfClass:", SM_IMP(root_is_kind), "C@:#");
  sm__method(g_root, "label", SM_IMP(root_label), "@@:");
  sm__method(g_root, "setLabel:", SM_IMP(root_set_label), "v@:@");
  objc_registerClassPair(g_root);

  Class c = sm__class_begin(&sm__string_class);
  sm__method(c, "initWithBytes:length:encoding:", SM_IMP(string_init_bytes), "@@:r^vQQ");
  sm__class_method(c, "stringWithCString:encoding:", SM_IMP(string_with_cstring), "@@:r*Q");
  sm__method(c, "UTF8String", SM_IMP(string_utf8), "r*@:");
  sm__method(c, "length", SM_IMP(string_length), "Q@:");
  sm__method(c, "isEqualToString:", SM_IMP(string_is_equal), "C@:@");
  sm__class_end(&sm__string_class);

  c = sm__class_begin(&sm__error_class);
  sm__method(c, "domain", SM_IMP(error_domain), "@@:");
  sm__method(c, "code", SM_IMP(error_code), "q@:");
  sm__method(c, "localizedDescription", SM_IMP(error_description), "@@:");
  sm__class_end(&sm__error_class);

  c = sm__class_begin(&sm__array_class);
  sm__method(c, "count", SM_IMP(array_count), "Q@:");
  sm__method(c, "objectAtIndex:", SM_IMP(array_object_at), "@@:Q");
  sm__class_end(&sm__array_class);
}

/* Every class and method exists before any thread of ours starts. */
__attribute__((constructor)) static void softmetal_load(void) {
  pthread_key_create(&g_pool_key, pool_thread_exit);
  __objc_msg_forward2 = forward_hook;
  register_foundation();
  sm__register_metal();
  sm__register_msl();
  sm__register_archive();
}

#if defined(__SANITIZE_ADDRESS__)
/* GNU libobjc keeps some registration strings only in hashed tables, which
 * LeakSanitizer reports as leaks; they live as long as the process. */
SM_EXPORT const char *__lsan_default_suppressions(void);
SM_EXPORT const char *__lsan_default_suppressions(void) { return "leak:libobjc.so\n"; }
#endif
