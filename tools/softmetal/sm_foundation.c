/* SPDX-License-Identifier: MIT */
/* softmetal object model and Foundation subset: the root class NSObject,
 * refcounting, autorelease pools, NSString (and clang's string literals,
 * NXConstantString), NSError, NSArray, NSLock, NSAutoreleasePool,
 * NSProcessInfo, NSBundle, NSLog, blocks, unknown selectors. */
#include "sm_internal.h"

#include <Block.h>
#include <limits.h>
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

enum { SM_MAX_CLASSES = 96 };
static sm_class *g_classes[SM_MAX_CLASSES];
static int g_nclasses;
static Class g_root;
static Class g_cstr; /* NXConstantString: string literals compiled for the GNU runtime */
static sm_class object_class = {"NSObject", sizeof(sm_obj), NULL, Nil, 0};

/* The layout clang gives string literals for the GNU runtime. */
typedef struct {
  Class isa;
  const char *c_string;
  unsigned int len;
} sm_cstr;
static bool is_literal(id o) { return o && g_cstr && object_getClass(o) == g_cstr; }
Class sm__root_class(void) { return g_root; }

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

/* The object counts of softmetal_stats (sm_load.c adds the rest). */
void sm__object_stats(struct softmetal_stats *out) {
  long live = 0;
  for (int i = 0; i < g_nclasses; i++) live += atomic_load(&g_classes[i]->live);
  out->live_objects = live;
  out->allocs = atomic_load(&g_allocs);
  out->deallocs = atomic_load(&g_deallocs);
  out->retains = atomic_load(&g_retains);
  out->releases = atomic_load(&g_releases);
  out->autoreleases = atomic_load(&g_autoreleases);
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

Class sm__class_begin_super(sm_class *k, Class super) {
  if (g_nclasses == SM_MAX_CLASSES) sm__fatal("too many classes");
  Class c = objc_allocateClassPair(super, k->name, 0);
  if (!c) sm__fatal("class %s already exists in this process", k->name);
  k->objc = c;
  g_classes[g_nclasses++] = k;
  return c;
}

Class sm__class_begin(sm_class *k) { return sm__class_begin_super(k, g_root); }

void sm__class_end(sm_class *k) { objc_registerClassPair(k->objc); }

void sm__methods(Class c, const sm_method_def *table) {
  for (; table && table->sel; table++) {
    if (table->sel[0] == '+')
      sm__class_method(c, table->sel + 1, table->imp, table->types);
    else
      sm__method(c, table->sel, table->imp, table->types);
  }
}

Class sm__class_define(sm_class *k, Class super, const sm_method_def *const *tables) {
  Class c = sm__class_begin_super(k, super ? super : g_root);
  for (; *tables; tables++) sm__methods(c, *tables);
  sm__class_end(k);
  return c;
}

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

bool sm__is(id o, const sm_class *k) { return o && !is_literal(o) && ((sm_obj *)o)->cls == k; }
bool sm__is_named(id o, const char *name) {
  return o && !is_literal(o) && strcmp(((sm_obj *)o)->cls->name, name) == 0;
}

/* ------------------------------------------------------------- root methods */
static id root_alloc(id cls, SEL cmd) {
  sm_class *k = class_info((Class)cls);
  if (k) return sm__new(k);
  /* A class of the program's own: a subclass of NSObject (or of a class of
   * ours without instance variables), laid out as the compiler saw it. */
  Class c = class_getSuperclass((Class)cls);
  while (c && !(k = class_info(c))) c = class_getSuperclass(c);
  if (!k || k->size != sizeof(sm_obj))
    sm__fatal("+[%s %s]: %s", class_getName((Class)cls), sel_getName(cmd),
              k ? "softmetal supports subclasses of NSObject only, not of its Metal and "
                  "Foundation classes"
                : "not a subclass of NSObject");
  size_t size = class_getInstanceSize((Class)cls);
  if (size < sizeof(sm_obj))
    sm__fatal("+[%s %s]: instance size %zu is smaller than NSObject's %zu: compiled against "
              "another NSObject declaration",
              class_getName((Class)cls), sel_getName(cmd), size, sizeof(sm_obj));
  sm_obj *o = calloc(1, size);
  if (!o) return nil;
  o->isa = (Class)cls;
  o->cls = k;
  atomic_init(&o->rc, 1);
  atomic_fetch_add(&k->live, 1);
  atomic_fetch_add(&g_allocs, 1);
  return (id)o;
}

/* +new: alloc, then init through the class's own init. */
static id root_new(id cls, SEL cmd) {
  (void)cmd;
  id o = ((id(*)(id, SEL))(void (*)(void))sm__lookup(cls, "alloc"))(cls, sel_registerName("alloc"));
  if (!o) return nil;
  return ((id(*)(id, SEL))(void (*)(void))sm__lookup(o, "init"))(o, sel_registerName("init"));
}

static id root_init(id self, SEL cmd) {
  (void)cmd;
  return self;
}

id sm__retain(id o) {
  if (!o || is_literal(o)) return o;
  sm_obj *s = (sm_obj *)o;
  long old = atomic_fetch_add(&s->rc, 1);
  if (old <= 0) sm__fatal("-[%s retain]: object already deallocated", s->cls->name);
  atomic_fetch_add(&g_retains, 1);
  return o;
}

void sm__release(id o) {
  if (!o || is_literal(o)) return;
  sm_obj *s = (sm_obj *)o;
  atomic_fetch_add(&g_releases, 1);
  long old = atomic_fetch_sub(&s->rc, 1);
  if (old <= 0) sm__fatal("-[%s release]: over-release (retain count was %ld)", s->cls->name, old);
  if (old == 1) {
    void (*dealloc)(id, SEL) = (void (*)(id, SEL))(void (*)(void))sm__lookup(o, "dealloc");
    dealloc(o, sel_registerName("dealloc"));
  }
}

static id root_retain(id self, SEL cmd) {
  (void)cmd;
  return sm__retain(self);
}
static void root_release(id self, SEL cmd) {
  (void)cmd;
  sm__release(self);
}
static id root_autorelease(id self, SEL cmd) {
  (void)cmd;
  return sm__autorelease(self);
}
static NSUInteger root_retain_count(id self, SEL cmd) {
  (void)cmd;
  return (NSUInteger)atomic_load(&((sm_obj *)self)->rc);
}

static void root_dealloc(id self, SEL cmd) {
  (void)cmd;
  sm_obj *s = (sm_obj *)self;
  sm_class *k = (sm_class *)s->cls;
  if (k->destroy) k->destroy(s);
  if (atomic_load(&s->host) && sm__host_free_hook) sm__host_free_hook(s);
  sm__release(s->label);
  atomic_fetch_sub(&k->live, 1);
  atomic_fetch_add(&g_deallocs, 1);
  free(s);
}

static Class root_class(id self, SEL cmd) {
  (void)cmd;
  return object_getClass(self);
}
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

static BOOL root_is_member(id self, SEL cmd, Class c) {
  (void)cmd;
  return object_getClass(self) == c;
}
static BOOL root_conforms(id self, SEL cmd, Protocol *p) {
  (void)cmd;
  for (Class k = object_getClass(self); k; k = class_getSuperclass(k))
    if (class_conformsToProtocol(k, p)) return 1;
  return 0;
}
static id root_self(id self, SEL cmd) {
  (void)cmd;
  return self;
}
static Class root_superclass(id self, SEL cmd) {
  (void)cmd;
  return class_getSuperclass(object_getClass(self));
}
static BOOL root_is_equal(id self, SEL cmd, id other) {
  (void)cmd;
  return self == other;
}
static NSUInteger root_hash(id self, SEL cmd) {
  (void)cmd;
  return (NSUInteger)(uintptr_t)self;
}
static id root_description(id self, SEL cmd) {
  (void)cmd;
  char text[160];
  snprintf(text, sizeof text, "<%s: %p>", object_getClassName(self), (void *)self);
  return sm__autorelease(sm__string(text));
}

static id root_label(id self, SEL cmd) {
  (void)cmd;
  return ((sm_obj *)self)->label;
}
static void root_set_label(id self, SEL cmd, id label) {
  sm_obj *s = (sm_obj *)self;
  if (label && !sm__is_string(label))
    sm__fatal("-[%s %s]: label is a %s, not an NSString", s->cls->name, sel_getName(cmd),
              object_getClassName(label));
  id copy = sm__string_copy(label); /* label is a copy property */
  sm__release(s->label);
  s->label = copy;
}

/* Class objects are never counted or freed. */
static id class_retain(id self, SEL cmd) {
  (void)cmd;
  return self;
}
static void class_release(id self, SEL cmd) {
  (void)self;
  (void)cmd;
}

/* ------------------------------------------------------------- unknown selectors */
static void unknown_selector(id self, SEL cmd) {
  Class c = self ? object_getClass(self) : Nil;
  const char *kind = c && class_isMetaClass(c) ? "+" : "-";
  const char *name = self ? object_getClassName(self) : "nil";
  sm__fatal("%s[%s %s]: unrecognized selector sent to %p", kind, name, sel_getName(cmd),
            (void *)self);
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
    fprintf(stderr, "softmetal: thread exited with %zu autorelease pool(s) not popped\n", p->depth);
  free(p->items);
  free(p->marks);
  memset(p, 0, sizeof *p);
}

void *sm__pool_push(void) {
  pool_stack *p = &t_pools;
  if (p->depth == p->mark_cap) {
    if (!sm__grow(&p->marks, &p->mark_cap, sizeof *p->marks, 16))
      sm__fatal("objc_autoreleasePoolPush: out of memory");
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
              "thread (pool depth %zu)",
              token, p->depth);
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
  if (!o || is_literal(o)) return o;
  pool_stack *p = &t_pools;
  if (p->depth == 0)
    sm__fatal("-[%s autorelease]: no autorelease pool in place on this thread "
              "(the object would leak)",
              ((sm_obj *)o)->cls->name);
  if (p->n == p->cap) {
    if (!sm__grow(&p->items, &p->cap, sizeof *p->items, 64))
      sm__fatal("-[%s autorelease]: out of memory", ((sm_obj *)o)->cls->name);
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
    if (c < 0x80) {
      extra = 0;
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else
      return -1;
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

static id string_init_bytes(id self, SEL cmd, const void *bytes, NSUInteger len, NSUInteger enc) {
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

static id string_with_utf8(id cls, SEL cmd, const char *cstr) {
  return string_with_cstring(cls, cmd, cstr, NS_UTF8);
}
static id string_init_utf8(id self, SEL cmd, const char *cstr) {
  (void)cmd;
  if (!cstr) {
    sm__release(self);
    return nil;
  }
  return string_fill((sm_string *)self, cstr, strlen(cstr), NS_UTF8);
}
static id string_init_nocopy(id self, SEL cmd, void *bytes, NSUInteger len, NSUInteger enc,
                             BOOL free_when_done) {
  (void)cmd;
  id s = string_fill((sm_string *)self, bytes, len, enc); /* keeps its own copy */
  if (s && free_when_done) free(bytes); /* freeWhenDone: the bytes came from malloc */
  return s;
}

bool sm__is_string(id s) { return sm__is(s, &sm__string_class) || is_literal(s); }

bool sm__equal(id a, id b) {
  if (a == b) return true;
  if (!a || !b) return false;
  if (sm__is_string(a) || sm__is_string(b))
    return sm__is_string(a) && sm__is_string(b) &&
           strcmp(sm__string_utf8(a), sm__string_utf8(b)) == 0;
  BOOL (*eq)(id, SEL, id) = (BOOL(*)(id, SEL, id))(void (*)(void))sm__lookup(a, "isEqual:");
  return eq(a, sel_registerName("isEqual:"), b);
}

const char *sm__string_utf8(id s) {
  if (!s) return NULL;
  if (is_literal(s)) return ((sm_cstr *)s)->c_string;
  if (!sm__is(s, &sm__string_class))
    sm__fatal("expected an NSString, got a %s", object_getClassName(s));
  return ((sm_string *)s)->bytes;
}

id sm__string_copy(id s) {
  if (!s) return nil;
  if (!is_literal(s)) {
    sm__string_utf8(s);   /* checks it is a string */
    return sm__retain(s); /* immutable */
  }
  return sm__string(((sm_cstr *)s)->c_string);
}

static const char *string_utf8(id self, SEL cmd) {
  (void)cmd;
  return sm__string_utf8(self);
}
static NSUInteger string_length(id self, SEL cmd) {
  (void)cmd;
  if (!is_literal(self)) return ((sm_string *)self)->utf16_len;
  const char *c = ((sm_cstr *)self)->c_string;
  long n = utf8_utf16_length((const unsigned char *)c, strlen(c));
  return n < 0 ? 0 : (NSUInteger)n;
}
static BOOL string_is_equal(id self, SEL cmd, id other) {
  (void)cmd;
  if (!sm__is_string(other)) return 0;
  return strcmp(sm__string_utf8(self), sm__string_utf8(other)) == 0;
}
static NSUInteger string_hash(id self, SEL cmd) {
  (void)cmd;
  uint64_t h = 1469598103934665603u; /* FNV-1a of the UTF-8 bytes */
  for (const unsigned char *p = (const unsigned char *)sm__string_utf8(self); *p; p++)
    h = (h ^ *p) * 1099511628211u;
  return (NSUInteger)h;
}
static BOOL string_contains(id self, SEL cmd, id other) {
  if (!sm__is_string(other))
    sm__fatal("-[NSString %s]: argument is %s, not an NSString", sel_getName(cmd),
              other ? object_getClassName(other) : "nil");
  return strstr(sm__string_utf8(self), sm__string_utf8(other)) != NULL;
}
static BOOL string_has_prefix(id self, SEL cmd, id other) {
  (void)cmd;
  const char *p = sm__string_utf8(other);
  return p && *p && strncmp(sm__string_utf8(self), p, strlen(p)) == 0;
}
static BOOL string_has_suffix(id self, SEL cmd, id other) {
  (void)cmd;
  const char *a = sm__string_utf8(self), *p = sm__string_utf8(other);
  size_t na = strlen(a), np = p ? strlen(p) : 0;
  return np && np <= na && strcmp(a + na - np, p) == 0;
}
static id string_join(const char *a, const char *sep, const char *b) {
  size_t na = strlen(a), ns = strlen(sep), nb = strlen(b);
  char *t = malloc(na + ns + nb + 1);
  if (!t) sm__fatal("NSString: out of memory");
  memcpy(t, a, na);
  memcpy(t + na, sep, ns);
  memcpy(t + na + ns, b, nb + 1);
  id s = sm__string(t);
  free(t);
  return sm__autorelease(s);
}
static id string_append_path(id self, SEL cmd, id component) {
  if (!sm__is_string(component))
    sm__fatal("-[NSString %s]: argument is %s, not an NSString", sel_getName(cmd),
              component ? object_getClassName(component) : "nil");
  const char *a = sm__string_utf8(self), *b = sm__string_utf8(component);
  size_t na = strlen(a);
  while (na > 1 && a[na - 1] == '/') na--; /* "dir/" + "x" = "dir/x", as Foundation */
  while (*b == '/') b++;
  char *head = strndup(a, na);
  if (!head) sm__fatal("NSString: out of memory");
  const char *sep = na == 0 || head[na - 1] == '/' || !*b ? "" : "/";
  id s = string_join(head, sep, b);
  free(head);
  return s;
}
static id string_append(id self, SEL cmd, id other) {
  (void)cmd;
  return string_join(sm__string_utf8(self), "", other ? sm__string_utf8(other) : "");
}
static id string_self_copy(id self, SEL cmd) {
  (void)cmd;
  return sm__string_copy(self);
}
static id string_description(id self, SEL cmd) {
  (void)cmd;
  return self;
}
static BOOL literal_is_kind(id self, SEL cmd, Class c) {
  (void)self;
  (void)cmd;
  return c == sm__string_class.objc || c == g_cstr || c == g_root;
}
static id literal_retain(id self, SEL cmd) {
  (void)cmd;
  return self;
}
static void literal_release(id self, SEL cmd) {
  (void)self;
  (void)cmd;
}
static Class literal_class(id self, SEL cmd) {
  (void)cmd;
  return object_getClass(self);
}
static BOOL literal_responds(id self, SEL cmd, SEL sel) {
  (void)cmd;
  return class_respondsToSelector(object_getClass(self), sel) ? 1 : 0;
}

id sm__string(const char *utf8) {
  return string_fill(sm__new(&sm__string_class), utf8, strlen(utf8), NS_UTF8);
}

/* ------------------------------------------------------------- NSError */
typedef struct {
  sm_obj hdr;
  id domain, description;
  NSInteger code;
  _Atomic(id) user_info; /* made on first use */
} sm_error;

static void error_destroy(sm_obj *o) {
  sm_error *e = (sm_error *)o;
  sm__release(e->domain);
  sm__release(e->description);
  sm__release(atomic_load(&e->user_info));
}
sm_class sm__error_class = {"NSError", sizeof(sm_error), error_destroy, Nil, 0};

/* Error domains are exported NSString objects, compared by pointer as Apple's:
 * Foundation's here, the others registered by their frameworks
 * (sm__error_domain). */
SM_EXPORT id NSCocoaErrorDomain, NSPOSIXErrorDomain;
enum { MAX_DOMAINS = 16 };
static id *g_domains[MAX_DOMAINS];
static const char *g_domain_names[MAX_DOMAINS];
static size_t g_ndomains;

void sm__error_domain(id *slot, const char *name) {
  if (g_ndomains == MAX_DOMAINS) sm__fatal("too many error domains");
  *slot = sm__immortal(sm__string(name));
  g_domains[g_ndomains] = slot;
  g_domain_names[g_ndomains++] = name;
}

/* An object that lives as long as the process, not counted as live (nor
 * as allocated): shared instances, error domains. */
id sm__immortal(id o) {
  if (!o) sm__fatal("out of memory making a shared instance");
  atomic_store(&((sm_obj *)o)->rc, LONG_MAX / 2);
  atomic_fetch_sub(&((sm_class *)((sm_obj *)o)->cls)->live, 1);
  atomic_fetch_sub(&g_allocs, 1);
  return o;
}

static id domain_string(const char *domain) {
  for (size_t i = 0; i < g_ndomains; i++)
    if (strcmp(domain, g_domain_names[i]) == 0) return sm__retain(*g_domains[i]);
  return sm__string(domain);
}

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
    e->domain = domain_string(domain);
    e->description = sm__string(text);
    e->code = code;
    if (!e->description) e->description = sm__string("(message was not valid UTF-8)");
  }
  if (text != small) free(text);
  return (id)e;
}

static id error_domain(id self, SEL cmd) {
  (void)cmd;
  return ((sm_error *)self)->domain;
}
static NSInteger error_code(id self, SEL cmd) {
  (void)cmd;
  return ((sm_error *)self)->code;
}
static id error_description(id self, SEL cmd) {
  (void)cmd;
  return ((sm_error *)self)->description;
}
/* userInfo: {NSLocalizedDescription: the message}, as Metal's errors carry. */
static id error_user_info(id self, SEL cmd) {
  (void)cmd;
  sm_error *e = (sm_error *)self;
  id info = atomic_load(&e->user_info);
  if (info) return info;
  id key = sm__string("NSLocalizedDescription");
  id made = sm__dictionary_hook ? sm__dictionary_hook(&key, &e->description, 1) : nil;
  sm__release(key);
  id expected = nil;
  if (!atomic_compare_exchange_strong(&e->user_info, &expected, made)) {
    sm__release(made);
    return expected;
  }
  return made;
}
static id error_full_description(id self, SEL cmd) {
  (void)cmd;
  sm_error *e = (sm_error *)self;
  const char *d = sm__string_utf8(e->description);
  size_t n = strlen(d) * 2 + strlen(sm__string_utf8(e->domain)) + 128;
  char *t = malloc(n);
  if (!t) sm__fatal("-[NSError description]: out of memory");
  snprintf(t, n, "Error Domain=%s Code=%ld \"%s\" UserInfo={NSLocalizedDescription=%s}",
           sm__string_utf8(e->domain), (long)e->code, d, d);
  id s = sm__string(t);
  free(t);
  return sm__autorelease(s);
}

/* ------------------------------------------------------------- NSArray */
typedef struct {
  sm_obj hdr;
  id *items;
  NSUInteger n, cap;
  unsigned long mutations; /* fast enumeration's mutation counter */
} sm_array;
static Class g_mutable_array;

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
  a->cap = n ? n : 1;
  return (id)a;
}

static NSUInteger array_count(id self, SEL cmd) {
  (void)cmd;
  return ((sm_array *)self)->n;
}
static id array_first(id self, SEL cmd) {
  (void)cmd;
  sm_array *a = (sm_array *)self;
  return a->n ? a->items[0] : nil;
}
static id array_last(id self, SEL cmd) {
  (void)cmd;
  sm_array *a = (sm_array *)self;
  return a->n ? a->items[a->n - 1] : nil;
}
static BOOL array_contains(id self, SEL cmd, id o) {
  (void)cmd;
  sm_array *a = (sm_array *)self;
  for (NSUInteger i = 0; o && i < a->n; i++)
    if (sm__equal(o, a->items[i])) return 1;
  return 0;
}
/* Immutable: a copy is the same array; a mutable one's copy is immutable. */
static id array_copy(id self, SEL cmd) {
  (void)cmd;
  sm_array *a = (sm_array *)self;
  if (object_getClass(self) != g_mutable_array) return sm__retain(self);
  return sm__array(a->items, a->n);
}
static id array_mutable_copy(id self, SEL cmd) {
  (void)cmd;
  sm_array *a = (sm_array *)self;
  id m = sm__array(a->items, a->n);
  if (m) object_setClass(m, g_mutable_array);
  return m;
}
static id array_empty(id cls, SEL cmd) {
  (void)cmd;
  id a = sm__array(NULL, 0);
  if (a) object_setClass(a, (Class)cls);
  return sm__autorelease(a);
}
static id array_with_object(id cls, SEL cmd, id o) {
  if (!o) sm__fatal("+[%s %s]: object is nil", class_getName((Class)cls), sel_getName(cmd));
  id a = sm__array(&o, 1);
  if (a) object_setClass(a, (Class)cls);
  return sm__autorelease(a);
}
static NSUInteger array_enumerate(id self, SEL cmd, sm_fast_enum_state *st, id *buf,
                                  NSUInteger len) {
  (void)cmd;
  (void)buf;
  (void)len;
  sm_array *a = (sm_array *)self;
  if (st->state) return 0;
  st->state = 1;
  st->items = a->items;
  st->mutations = &a->mutations;
  return a->n;
}
/* NSMutableArray: alloc makes an NSArray object of the mutable class. */
static id marray_alloc(id cls, SEL cmd) {
  (void)cmd;
  id a = sm__array(NULL, 0);
  if (a) object_setClass(a, (Class)cls);
  return a;
}
static id marray_init_capacity(id self, SEL cmd, NSUInteger cap) {
  (void)cmd;
  (void)cap;
  return self;
}
static id marray_with_capacity(id cls, SEL cmd, NSUInteger cap) {
  (void)cap;
  return sm__autorelease(marray_alloc(cls, cmd));
}
static void marray_add(id self, SEL cmd, id o) {
  sm_array *a = (sm_array *)self;
  if (!o) sm__fatal("-[NSMutableArray %s]: object is nil", sel_getName(cmd));
  if (a->n == a->cap) {
    if (!sm__grow(&a->items, &a->cap, sizeof *a->items, 1))
      sm__fatal("-[NSMutableArray %s]: out of memory", sel_getName(cmd));
  }
  a->items[a->n++] = sm__retain(o);
  a->mutations++;
}
static void marray_remove_at(id self, SEL cmd, NSUInteger i) {
  sm_array *a = (sm_array *)self;
  if (i >= a->n)
    sm__fatal("-[NSMutableArray %s]: index %lu beyond bounds (count %lu)", sel_getName(cmd), i,
              a->n);
  id o = a->items[i];
  memmove(a->items + i, a->items + i + 1, (a->n - i - 1) * sizeof(id));
  a->n--;
  a->mutations++;
  sm__release(o);
}
static void marray_remove_last(id self, SEL cmd) {
  sm_array *a = (sm_array *)self;
  if (!a->n) sm__fatal("-[NSMutableArray %s]: the array is empty", sel_getName(cmd));
  marray_remove_at(self, cmd, a->n - 1);
}
static void marray_remove_all(id self, SEL cmd) {
  (void)cmd;
  sm_array *a = (sm_array *)self;
  while (a->n) sm__release(a->items[--a->n]);
  a->mutations++;
}
static void marray_remove_object(id self, SEL cmd, id o) {
  sm_array *a = (sm_array *)self;
  for (NSUInteger i = a->n; o && i-- > 0;)
    if (sm__equal(o, a->items[i])) marray_remove_at(self, cmd, i);
}
static id array_object_at(id self, SEL cmd, NSUInteger i) {
  sm_array *a = (sm_array *)self;
  if (i >= a->n)
    sm__fatal("-[NSArray %s]: index %lu beyond bounds (count %lu)", sel_getName(cmd), i, a->n);
  return a->items[i];
}

static id array_with_objects(id self, SEL cmd, const id *objects, NSUInteger count) {
  (void)self;
  for (NSUInteger i = 0; i < count; i++)
    if (objects[i] == nil) sm__fatal("+[NSArray %s]: objects[%lu] is nil", sel_getName(cmd), i);
  return sm__autorelease(sm__array((id *)objects, count));
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
static Class meta_class_self(id self, SEL cmd) {
  (void)cmd;
  return (Class)self;
}
static Class meta_superclass(id self, SEL cmd) {
  (void)cmd;
  return class_getSuperclass((Class)self);
}
static id meta_description(id self, SEL cmd) {
  (void)cmd;
  return sm__autorelease(sm__string(class_getName((Class)self)));
}
static BOOL meta_responds(id self, SEL cmd, SEL sel) {
  (void)cmd;
  return class_respondsToSelector(object_getClass(self), sel) ? 1 : 0;
}
static BOOL meta_instances_respond(id self, SEL cmd, SEL sel) {
  (void)cmd;
  return class_respondsToSelector((Class)self, sel) ? 1 : 0;
}
static BOOL meta_is_subclass(id self, SEL cmd, Class c) {
  (void)cmd;
  for (Class k = (Class)self; k; k = class_getSuperclass(k))
    if (k == c) return 1;
  return 0;
}

/* Methods of our strings on clang's string literals (NXConstantString of
 * GNU libobjc), which are never counted or freed. */
static void literal_method(const char *sel, IMP imp, const char *types) {
  if (!class_getInstanceMethod(g_cstr, sel_registerName(sel)))
    class_addMethod(g_cstr, sel_registerName(sel), imp, types);
}

/* Only methods NXConstantString lacks are added: GNU libobjc's
 * class_replaceMethod of a method it has (length, isEqual:, class) also
 * rewrites the dispatch tables of unrelated classes with a method of that
 * name. So a literal's length is its byte count (GNU's; the same for ASCII)
 * and its isEqual: compares pointers (softmetal's collections and
 * isEqualToString: compare literals by content). */
static void register_literals(void) {
  g_cstr = objc_getClass("NXConstantString");
  if (g_cstr) {
    literal_method("UTF8String", SM_IMP(string_utf8), "r*@:");
    literal_method("cStringUsingEncoding:", SM_IMP(string_utf8), "r*@:Q");
    literal_method("fileSystemRepresentation", SM_IMP(string_utf8), "r*@:");
    literal_method("length", SM_IMP(string_length), "Q@:");
    literal_method("isEqualToString:", SM_IMP(string_is_equal), "C@:@");
    literal_method("isEqual:", SM_IMP(string_is_equal), "C@:@");
    literal_method("hash", SM_IMP(string_hash), "Q@:");
    literal_method("containsString:", SM_IMP(string_contains), "C@:@");
    literal_method("hasPrefix:", SM_IMP(string_has_prefix), "C@:@");
    literal_method("hasSuffix:", SM_IMP(string_has_suffix), "C@:@");
    literal_method("stringByAppendingPathComponent:", SM_IMP(string_append_path), "@@:@");
    literal_method("stringByAppendingString:", SM_IMP(string_append), "@@:@");
    literal_method("copy", SM_IMP(string_self_copy), "@@:");
    literal_method("description", SM_IMP(string_description), "@@:");
    literal_method("retain", SM_IMP(literal_retain), "@@:");
    literal_method("autorelease", SM_IMP(literal_retain), "@@:");
    literal_method("release", SM_IMP(literal_release), "v@:");
    literal_method("class", SM_IMP(literal_class), "#@:");
    literal_method("isKindOfClass:", SM_IMP(literal_is_kind), "C@:#");
    literal_method("respondsToSelector:", SM_IMP(literal_responds), "C@::");
  }
}

static void register_foundation(void) {
  g_root = objc_allocateClassPair(Nil, "NSObject", 0);
  if (!g_root) sm__fatal("class NSObject already exists in this process");
  /* The instance variables of NSObject, which a subclass compiled against
   * softmetal's NSObject declaration lays its own after. */
  class_addIvar(g_root, "isa", sizeof(Class), 3, "#");
  class_addIvar(g_root, "_sm_cls", sizeof(void *), 3, "^v");
  class_addIvar(g_root, "_sm_rc", sizeof(long), 3, "q");
  class_addIvar(g_root, "_sm_label", sizeof(id), 3, "@");
  class_addIvar(g_root, "_sm_host", sizeof(void *), 3, "^v");
  object_class.objc = g_root;
  g_classes[g_nclasses++] = &object_class;
  sm__class_method(g_root, "alloc", SM_IMP(root_alloc), "@@:");
  sm__class_method(g_root, "new", SM_IMP(root_new), "@@:");
  sm__class_method(g_root, "class", SM_IMP(meta_class_self), "#@:");
  sm__class_method(g_root, "superclass", SM_IMP(meta_superclass), "#@:");
  sm__class_method(g_root, "description", SM_IMP(meta_description), "@@:");
  sm__class_method(g_root, "respondsToSelector:", SM_IMP(meta_responds), "C@::");
  sm__class_method(g_root, "instancesRespondToSelector:", SM_IMP(meta_instances_respond), "C@::");
  sm__class_method(g_root, "isSubclassOfClass:", SM_IMP(meta_is_subclass), "C@:#");
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
  sm__method(g_root, "isMemberOfClass:", SM_IMP(root_is_member), "C@:#");
  sm__method(g_root, "conformsToProtocol:", SM_IMP(root_conforms), "C@:@");
  sm__method(g_root, "self", SM_IMP(root_self), "@@:");
  sm__method(g_root, "superclass", SM_IMP(root_superclass), "#@:");
  sm__method(g_root, "isEqual:", SM_IMP(root_is_equal), "C@:@");
  sm__method(g_root, "hash", SM_IMP(root_hash), "Q@:");
  sm__method(g_root, "description", SM_IMP(root_description), "@@:");
  sm__method(g_root, "debugDescription", SM_IMP(root_description), "@@:");
  sm__method(g_root, "label", SM_IMP(root_label), "@@:");
  sm__method(g_root, "setLabel:", SM_IMP(root_set_label), "v@:@");
  objc_registerClassPair(g_root);

  Class c = sm__class_begin(&sm__string_class);
  sm__method(c, "initWithBytes:length:encoding:", SM_IMP(string_init_bytes), "@@:r^vQQ");
  sm__class_method(c, "stringWithCString:encoding:", SM_IMP(string_with_cstring), "@@:r*Q");
  sm__method(c, "UTF8String", SM_IMP(string_utf8), "r*@:");
  sm__method(c, "length", SM_IMP(string_length), "Q@:");
  sm__method(c, "isEqualToString:", SM_IMP(string_is_equal), "C@:@");
  sm__class_method(c, "stringWithUTF8String:", SM_IMP(string_with_utf8), "@@:r*");
  sm__method(c, "initWithUTF8String:", SM_IMP(string_init_utf8), "@@:r*");
  sm__method(c, "initWithBytesNoCopy:length:encoding:freeWhenDone:", SM_IMP(string_init_nocopy),
             "@@:^vQQC");
  sm__method(c, "cStringUsingEncoding:", SM_IMP(string_utf8), "r*@:Q");
  sm__method(c, "fileSystemRepresentation", SM_IMP(string_utf8), "r*@:");
  sm__method(c, "isEqual:", SM_IMP(string_is_equal), "C@:@");
  sm__method(c, "hash", SM_IMP(string_hash), "Q@:");
  sm__method(c, "containsString:", SM_IMP(string_contains), "C@:@");
  sm__method(c, "hasPrefix:", SM_IMP(string_has_prefix), "C@:@");
  sm__method(c, "hasSuffix:", SM_IMP(string_has_suffix), "C@:@");
  sm__method(c, "stringByAppendingPathComponent:", SM_IMP(string_append_path), "@@:@");
  sm__method(c, "stringByAppendingString:", SM_IMP(string_append), "@@:@");
  sm__method(c, "copy", SM_IMP(string_self_copy), "@@:");
  sm__method(c, "description", SM_IMP(string_description), "@@:");
  sm__class_end(&sm__string_class);
  sm__error_domain(&NSCocoaErrorDomain, "NSCocoaErrorDomain");
  sm__error_domain(&NSPOSIXErrorDomain, "NSPOSIXErrorDomain");

  c = sm__class_begin(&sm__error_class);
  sm__method(c, "domain", SM_IMP(error_domain), "@@:");
  sm__method(c, "code", SM_IMP(error_code), "q@:");
  sm__method(c, "localizedDescription", SM_IMP(error_description), "@@:");
  sm__method(c, "userInfo", SM_IMP(error_user_info), "@@:");
  sm__method(c, "description", SM_IMP(error_full_description), "@@:");
  sm__class_end(&sm__error_class);

  c = sm__class_begin(&sm__array_class);
  sm__method(c, "count", SM_IMP(array_count), "Q@:");
  sm__method(c, "objectAtIndex:", SM_IMP(array_object_at), "@@:Q");
  sm__method(c, "objectAtIndexedSubscript:", SM_IMP(array_object_at), "@@:Q");
  sm__method(c, "firstObject", SM_IMP(array_first), "@@:");
  sm__method(c, "lastObject", SM_IMP(array_last), "@@:");
  sm__method(c, "containsObject:", SM_IMP(array_contains), "C@:@");
  sm__method(c, "copy", SM_IMP(array_copy), "@@:");
  sm__method(c, "mutableCopy", SM_IMP(array_mutable_copy), "@@:");
  sm__method(c, "countByEnumeratingWithState:objects:count:", SM_IMP(array_enumerate), "Q@:^v^@Q");
  sm__class_method(c, "array", SM_IMP(array_empty), "@@:");
  sm__class_method(c, "arrayWithObject:", SM_IMP(array_with_object), "@@:@");
  sm__class_method(c, "arrayWithObjects:count:", SM_IMP(array_with_objects), "@@:^@Q");
  sm__class_end(&sm__array_class);
  g_mutable_array = objc_allocateClassPair(c, "NSMutableArray", 0);
  if (!g_mutable_array) sm__fatal("class NSMutableArray already exists in this process");
  sm__class_method(g_mutable_array, "alloc", SM_IMP(marray_alloc), "@@:");
  sm__class_method(g_mutable_array, "arrayWithCapacity:", SM_IMP(marray_with_capacity), "@@:Q");
  sm__method(g_mutable_array, "initWithCapacity:", SM_IMP(marray_init_capacity), "@@:Q");
  sm__method(g_mutable_array, "addObject:", SM_IMP(marray_add), "v@:@");
  sm__method(g_mutable_array, "removeObjectAtIndex:", SM_IMP(marray_remove_at), "v@:Q");
  sm__method(g_mutable_array, "removeLastObject", SM_IMP(marray_remove_last), "v@:");
  sm__method(g_mutable_array, "removeObject:", SM_IMP(marray_remove_object), "v@:@");
  sm__method(g_mutable_array, "removeAllObjects", SM_IMP(marray_remove_all), "v@:");
  objc_registerClassPair(g_mutable_array);
}

/* The Foundation core: the root class, literals, strings, errors,
 * collections (the library constructor, sm_load.c, runs it first). */
void sm__register_foundation(void) {
  pthread_key_create(&g_pool_key, pool_thread_exit);
  __objc_msg_forward2 = forward_hook;
  register_literals();
  register_foundation();
}

#if defined(__SANITIZE_ADDRESS__)
/* GNU libobjc keeps some registration strings only in hashed tables, which
 * LeakSanitizer reports as leaks; they live as long as the process. */
SM_EXPORT const char *__lsan_default_suppressions(void);
SM_EXPORT const char *__lsan_default_suppressions(void) { return "leak:libobjc.so\n"; }
#endif
