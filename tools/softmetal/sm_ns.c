/* SPDX-License-Identifier: MIT */
/* Foundation classes Metal host programs send beyond the object model:
 * NSDictionary, NSMutableDictionary, NSNumber, NSLock, NSAutoreleasePool,
 * NSProcessInfo, NSBundle, NSLog and -[NSString stringWithFormat:]. */
#include "sm_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static BOOL send_is_equal(id a, id b) { return sm__equal(a, b); }

/* ------------------------------------------------------------- NSDictionary */
/* Entries in insertion order, found by isEqual: (dictionaries Metal programs
 * build hold a handful of entries). Keys are copied, as Foundation does. */
typedef struct {
  sm_obj hdr;
  id *keys, *values;
  size_t n, cap;
  unsigned long mutations;
} sm_dict;

static void dict_destroy(sm_obj *o) {
  sm_dict *d = (sm_dict *)o;
  for (size_t i = 0; i < d->n; i++) {
    sm__release(d->keys[i]);
    sm__release(d->values[i]);
  }
  free(d->keys);
  free(d->values);
}
static sm_class dict_class = {"NSDictionary", sizeof(sm_dict), dict_destroy, Nil, 0};
static Class g_mutable_dict;

static id key_copy(id key) {
  if (sm__is_string(key)) return sm__string_copy(key);
  id (*copy)(id, SEL) = (id(*)(id, SEL))(void (*)(void))sm__lookup(key, "copy");
  return copy(key, sel_registerName("copy"));
}

static size_t dict_find(const sm_dict *d, id key) {
  for (size_t i = 0; i < d->n; i++)
    if (send_is_equal(key, d->keys[i])) return i;
  return (size_t)-1;
}

static void dict_put(sm_dict *d, const char *sel, id key, id value) {
  if (!key || !value)
    sm__fatal("-[NSMutableDictionary %s]: %s is nil", sel, key ? "object" : "key");
  size_t i = dict_find(d, key);
  sm__retain(value);
  if (i != (size_t)-1) {
    sm__release(d->values[i]);
    d->values[i] = value;
    d->mutations++;
    return;
  }
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 4;
    id *k = realloc(d->keys, cap * sizeof *k);
    if (!k) sm__fatal("-[NSMutableDictionary %s]: out of memory", sel);
    d->keys = k;
    id *v = realloc(d->values, cap * sizeof *v);
    if (!v) sm__fatal("-[NSMutableDictionary %s]: out of memory", sel);
    d->values = v;
    d->cap = cap;
  }
  d->keys[d->n] = key_copy(key);
  d->values[d->n++] = value;
  d->mutations++;
}

id sm__dictionary_new(id *keys, id *values, size_t n) {
  sm_dict *d = sm__new(&dict_class);
  if (!d) return nil;
  for (size_t i = 0; i < n; i++)
    dict_put(d, "dictionaryWithObjects:forKeys:count:", keys[i], values[i]);
  return (id)d;
}

id sm__dictionary_get(id dict, const char *key) {
  if (!sm__is(dict, &dict_class)) return nil;
  sm_dict *d = (sm_dict *)dict;
  for (size_t i = 0; i < d->n; i++)
    if (sm__is_string(d->keys[i]) && strcmp(sm__string_utf8(d->keys[i]), key) == 0)
      return d->values[i];
  return nil;
}

void sm__dictionary_each(id dict, void (*fn)(id key, id value, void *ctx), void *ctx) {
  sm_dict *d = (sm_dict *)dict;
  for (size_t i = 0; i < d->n; i++) fn(d->keys[i], d->values[i], ctx);
}

static id dict_with(id cls, SEL cmd, const id *values, const id *keys, NSUInteger n) {
  for (NSUInteger i = 0; i < n; i++)
    if (!keys[i] || !values[i])
      sm__fatal("+[%s %s]: %s[%lu] is nil", class_getName((Class)cls), sel_getName(cmd),
                keys[i] ? "objects" : "keys", i);
  id d = sm__dictionary_new((id *)keys, (id *)values, n);
  if (d) object_setClass(d, (Class)cls);
  return sm__autorelease(d);
}
static id dict_empty(id cls, SEL cmd) { return dict_with(cls, cmd, NULL, NULL, 0); }
static id dict_with_pair(id cls, SEL cmd, id value, id key) {
  return dict_with(cls, cmd, &value, &key, 1);
}
static id dict_alloc(id cls, SEL cmd) {
  (void)cmd;
  id d = sm__dictionary_new(NULL, NULL, 0);
  if (d) object_setClass(d, (Class)cls);
  return d;
}
static id dict_init_capacity(id self, SEL cmd, NSUInteger cap) {
  (void)cmd;
  (void)cap;
  return self;
}
static id dict_with_capacity(id cls, SEL cmd, NSUInteger cap) {
  (void)cap;
  return sm__autorelease(dict_alloc(cls, cmd));
}
static NSUInteger dict_count(id self, SEL cmd) {
  (void)cmd;
  return ((sm_dict *)self)->n;
}
static id dict_get(id self, SEL cmd, id key) {
  (void)cmd;
  sm_dict *d = (sm_dict *)self;
  size_t i = key ? dict_find(d, key) : (size_t)-1;
  return i == (size_t)-1 ? nil : d->values[i];
}
static id dict_list(id self, bool keys) {
  sm_dict *d = (sm_dict *)self;
  return sm__autorelease(sm__array(keys ? d->keys : d->values, d->n));
}
static id dict_all_keys(id self, SEL cmd) {
  (void)cmd;
  return dict_list(self, true);
}
static id dict_all_values(id self, SEL cmd) {
  (void)cmd;
  return dict_list(self, false);
}
static id dict_copy(id self, SEL cmd) {
  (void)cmd;
  sm_dict *d = (sm_dict *)self;
  if (object_getClass(self) != g_mutable_dict) return sm__retain(self);
  return sm__dictionary_new(d->keys, d->values, d->n);
}
static id dict_mutable_copy(id self, SEL cmd) {
  (void)cmd;
  sm_dict *d = (sm_dict *)self;
  id m = sm__dictionary_new(d->keys, d->values, d->n);
  if (m) object_setClass(m, g_mutable_dict);
  return m;
}
static NSUInteger dict_enumerate(id self, SEL cmd, sm_fast_enum_state *st, id *buf,
                                 NSUInteger len) {
  (void)cmd;
  (void)buf;
  (void)len;
  sm_dict *d = (sm_dict *)self;
  if (st->state) return 0;
  st->state = 1;
  st->items = d->keys;
  st->mutations = &d->mutations;
  return d->n;
}
static void mdict_set(id self, SEL cmd, id value, id key) {
  dict_put((sm_dict *)self, sel_getName(cmd), key, value);
}
static void mdict_remove(id self, SEL cmd, id key) {
  (void)cmd;
  sm_dict *d = (sm_dict *)self;
  size_t i = key ? dict_find(d, key) : (size_t)-1;
  if (i == (size_t)-1) return;
  sm__release(d->keys[i]);
  sm__release(d->values[i]);
  memmove(d->keys + i, d->keys + i + 1, (d->n - i - 1) * sizeof(id));
  memmove(d->values + i, d->values + i + 1, (d->n - i - 1) * sizeof(id));
  d->n--;
  d->mutations++;
}
static void mdict_remove_all(id self, SEL cmd) {
  (void)cmd;
  sm_dict *d = (sm_dict *)self;
  while (d->n) {
    d->n--;
    sm__release(d->keys[d->n]);
    sm__release(d->values[d->n]);
  }
  d->mutations++;
}

/* ------------------------------------------------------------- NSNumber */
enum { NUM_SIGNED, NUM_UNSIGNED, NUM_DOUBLE, NUM_BOOL };
typedef struct {
  sm_obj hdr;
  int kind;
  union {
    long long i;
    unsigned long long u;
    double d;
  } v;
} sm_number;
static sm_class number_class = {"NSNumber", sizeof(sm_number), NULL, Nil, 0};

static id number_make(int kind, long long i, unsigned long long u, double d) {
  sm_number *n = sm__new(&number_class);
  if (!n) return nil;
  n->kind = kind;
  if (kind == NUM_DOUBLE)
    n->v.d = d;
  else if (kind == NUM_UNSIGNED)
    n->v.u = u;
  else
    n->v.i = i;
  return (id)n;
}
id sm__number_u64(uint64_t v) { return number_make(NUM_UNSIGNED, 0, v, 0); }

#define NUMBER_CTOR(name, type, kind, field)                                                       \
  static id name(id cls, SEL cmd, type v) {                                                        \
    (void)cls;                                                                                     \
    (void)cmd;                                                                                     \
    return sm__autorelease(number_make(kind, (long long)(field == 0 ? v : 0),                      \
                                       (unsigned long long)(field == 1 ? v : 0),                   \
                                       (double)(field == 2 ? v : 0)));                             \
  }
NUMBER_CTOR(num_int, int, NUM_SIGNED, 0)
NUMBER_CTOR(num_long, long, NUM_SIGNED, 0)
NUMBER_CTOR(num_llong, long long, NUM_SIGNED, 0)
NUMBER_CTOR(num_uint, unsigned int, NUM_UNSIGNED, 1)
NUMBER_CTOR(num_ulong, unsigned long, NUM_UNSIGNED, 1)
NUMBER_CTOR(num_ullong, unsigned long long, NUM_UNSIGNED, 1)
NUMBER_CTOR(num_float, float, NUM_DOUBLE, 2)
NUMBER_CTOR(num_double, double, NUM_DOUBLE, 2)
static id num_bool(id cls, SEL cmd, BOOL v) {
  (void)cls;
  (void)cmd;
  return sm__autorelease(number_make(NUM_BOOL, v ? 1 : 0, 0, 0));
}

static long long num_as_ll(const sm_number *n) {
  return n->kind == NUM_DOUBLE     ? (long long)n->v.d
         : n->kind == NUM_UNSIGNED ? (long long)n->v.u
                                   : n->v.i;
}
static unsigned long long num_as_ull(const sm_number *n) {
  return n->kind == NUM_DOUBLE     ? (unsigned long long)n->v.d
         : n->kind == NUM_UNSIGNED ? n->v.u
                                   : (unsigned long long)n->v.i;
}
static double num_as_d(const sm_number *n) {
  return n->kind == NUM_DOUBLE ? n->v.d : n->kind == NUM_UNSIGNED ? (double)n->v.u : (double)n->v.i;
}
static int num_int_value(id s, SEL c) {
  (void)c;
  return (int)num_as_ll((sm_number *)s);
}
static long num_long_value(id s, SEL c) {
  (void)c;
  return (long)num_as_ll((sm_number *)s);
}
static long long num_llong_value(id s, SEL c) {
  (void)c;
  return num_as_ll((sm_number *)s);
}
static unsigned num_uint_value(id s, SEL c) {
  (void)c;
  return (unsigned)num_as_ull((sm_number *)s);
}
static unsigned long num_ulong_value(id s, SEL c) {
  (void)c;
  return (unsigned long)num_as_ull((sm_number *)s);
}
static unsigned long long num_ullong_value(id s, SEL c) {
  (void)c;
  return num_as_ull((sm_number *)s);
}
static float num_float_value(id s, SEL c) {
  (void)c;
  return (float)num_as_d((sm_number *)s);
}
static double num_double_value(id s, SEL c) {
  (void)c;
  return num_as_d((sm_number *)s);
}
static BOOL num_bool_value(id s, SEL c) {
  (void)c;
  return num_as_d((sm_number *)s) != 0;
}
static BOOL num_is_equal(id self, SEL cmd, id other) {
  (void)cmd;
  if (!sm__is(other, &number_class)) return 0;
  const sm_number *a = (sm_number *)self, *b = (sm_number *)other;
  if (a->kind == NUM_DOUBLE || b->kind == NUM_DOUBLE) return num_as_d(a) == num_as_d(b);
  if (a->kind == NUM_UNSIGNED || b->kind == NUM_UNSIGNED) {
    if ((a->kind != NUM_UNSIGNED && a->v.i < 0) || (b->kind != NUM_UNSIGNED && b->v.i < 0))
      return 0;
    return num_as_ull(a) == num_as_ull(b);
  }
  return a->v.i == b->v.i;
}
static NSUInteger num_hash(id self, SEL cmd) {
  (void)cmd;
  return (NSUInteger)num_as_ll((sm_number *)self);
}
static id num_description(id self, SEL cmd) {
  (void)cmd;
  const sm_number *n = (sm_number *)self;
  char t[64];
  if (n->kind == NUM_DOUBLE)
    snprintf(t, sizeof t, "%.17g", n->v.d);
  else if (n->kind == NUM_UNSIGNED)
    snprintf(t, sizeof t, "%llu", n->v.u);
  else
    snprintf(t, sizeof t, "%lld", n->v.i);
  return sm__autorelease(sm__string(t));
}
static id retain_self(id self, SEL cmd) {
  (void)cmd;
  return sm__retain(self);
}

/* ------------------------------------------------------------- NSLock */
typedef struct {
  sm_obj hdr;
  pthread_mutex_t mu;
  bool ready;
} sm_lock;
static void lock_destroy(sm_obj *o) {
  sm_lock *l = (sm_lock *)o;
  if (l->ready && pthread_mutex_destroy(&l->mu) == EBUSY)
    sm__fatal("-[NSLock dealloc]: the lock is held");
}
static sm_class lock_class = {"NSLock", sizeof(sm_lock), lock_destroy, Nil, 0};
static id lock_init(id self, SEL cmd) {
  (void)cmd;
  sm_lock *l = (sm_lock *)self;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK); /* misuse aborts, never hangs */
  pthread_mutex_init(&l->mu, &a);
  pthread_mutexattr_destroy(&a);
  l->ready = true;
  return self;
}
static sm_lock *lock_ready(id self, SEL cmd) {
  sm_lock *l = (sm_lock *)self;
  if (!l->ready) sm__fatal("-[NSLock %s]: the lock was not initialised (init)", sel_getName(cmd));
  return l;
}
static void lock_lock(id self, SEL cmd) {
  if (pthread_mutex_lock(&lock_ready(self, cmd)->mu) == EDEADLK)
    sm__fatal("-[NSLock %s]: deadlock: this thread already holds the lock", sel_getName(cmd));
}
static BOOL lock_try(id self, SEL cmd) {
  return pthread_mutex_trylock(&lock_ready(self, cmd)->mu) == 0;
}
static void lock_unlock(id self, SEL cmd) {
  if (pthread_mutex_unlock(&lock_ready(self, cmd)->mu) != 0)
    sm__fatal("-[NSLock %s]: this thread does not hold the lock", sel_getName(cmd));
}

/* ------------------------------------------------------------- NSAutoreleasePool */
typedef struct {
  sm_obj hdr;
  void *token;
} sm_pool;
static sm_class pool_class = {"NSAutoreleasePool", sizeof(sm_pool), NULL, Nil, 0};
static id pool_init(id self, SEL cmd) {
  (void)cmd;
  ((sm_pool *)self)->token = sm__pool_push();
  return self;
}
static void pool_drain(id self, SEL cmd) {
  sm_pool *p = (sm_pool *)self;
  if (!p->token)
    sm__fatal("-[NSAutoreleasePool %s]: the pool was not initialised (init)", sel_getName(cmd));
  sm__pool_pop(p->token);
  p->token = NULL;
  sm__release(self);
}
static id pool_refuse(id self, SEL cmd) {
  sm__fatal("-[NSAutoreleasePool %s]: pools cannot be retained or autoreleased (%p)",
            sel_getName(cmd), (void *)self);
}

/* ------------------------------------------------------------- strings with formats */
/* printf formats with %@ (the object's description). Each conversion is
 * parsed, checked against the supported set and printed on its own with the
 * argument type its length modifier names, so the built format is safe. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static char *format_v(const char *fmt, va_list ap) {
  size_t cap = 256, n = 0;
  char *out = malloc(cap);
  if (!out) return NULL;
  for (const char *p = fmt; *p;) {
    char piece[512];
    int len;
    if (*p != '%') {
      const char *q = strchr(p, '%');
      size_t k = q ? (size_t)(q - p) : strlen(p);
      if (k >= sizeof piece) k = sizeof piece - 1;
      memcpy(piece, p, k);
      piece[k] = 0;
      len = (int)k;
      p += k;
    } else {
      /* one conversion: %[flags][width][.precision][length]conv */
      char spec[32];
      size_t s = 0;
      spec[s++] = *p++;
      while (*p && strchr("-+ #0'", *p) && s < 20) spec[s++] = *p++;
      int star_w = 0, star_p = 0, has_w = 0, has_p = 0;
      if (*p == '*') {
        star_w = va_arg(ap, int);
        has_w = 1;
        p++;
      }
      while (*p >= '0' && *p <= '9' && s < 20) spec[s++] = *p++;
      if (*p == '.') {
        spec[s++] = *p++;
        if (*p == '*') {
          star_p = va_arg(ap, int);
          has_p = 1;
          p++;
        }
        while (*p >= '0' && *p <= '9' && s < 24) spec[s++] = *p++;
      }
      char lenmod[3] = "";
      size_t lm = 0;
      while (*p && strchr("hlqLzjt", *p) && lm < 2) lenmod[lm++] = *p++;
      lenmod[lm] = 0;
      char conv = *p ? *p++ : 0;
      if (has_w || has_p) { /* put the star values back as digits */
        char tmp[32];
        size_t t = 0;
        for (size_t i = 0; i < s && spec[i] != '.'; i++) tmp[t++] = spec[i];
        if (has_w) t += (size_t)snprintf(tmp + t, sizeof tmp - t, "%d", star_w);
        char *dot = memchr(spec, '.', s);
        if (dot) {
          tmp[t++] = '.';
          if (has_p)
            t += (size_t)snprintf(tmp + t, sizeof tmp - t, "%d", star_p);
          else
            for (char *d = dot + 1; d < spec + s; d++) tmp[t++] = *d;
        }
        memcpy(spec, tmp, t);
        s = t;
      }
      spec[s] = 0;
      char full[48];
      bool is_long = strcmp(lenmod, "l") == 0 || strcmp(lenmod, "q") == 0 ||
                     strcmp(lenmod, "ll") == 0 || strcmp(lenmod, "z") == 0 ||
                     strcmp(lenmod, "j") == 0 || strcmp(lenmod, "t") == 0;
      switch (conv) {
      case '%': len = snprintf(piece, sizeof piece, "%%"); break;
      case '@': {
        id o = va_arg(ap, id);
        const char *text = "(null)";
        if (o) {
          id (*desc)(id, SEL) = (id(*)(id, SEL))(void (*)(void))sm__lookup(o, "description");
          text = sm__string_utf8(desc(o, sel_registerName("description")));
        }
        snprintf(full, sizeof full, "%ss", spec);
        len = snprintf(piece, sizeof piece, full, text);
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o':
      case 'c':
      case 'D':
      case 'U':
      case 'O':
        snprintf(full, sizeof full, "%s%s%c", spec, is_long ? "ll" : "",
                 conv == 'D'   ? 'd'
                 : conv == 'U' ? 'u'
                 : conv == 'O' ? 'o'
                               : conv);
        if (is_long)
          len = snprintf(piece, sizeof piece, full, va_arg(ap, long long));
        else
          len = snprintf(piece, sizeof piece, full, va_arg(ap, int));
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
      case 'a':
      case 'A':
        snprintf(full, sizeof full, "%s%c", spec, conv);
        if (strcmp(lenmod, "L") == 0)
          len = snprintf(piece, sizeof piece, full, va_arg(ap, long double));
        else
          len = snprintf(piece, sizeof piece, full, va_arg(ap, double));
        break;
      case 's':
        snprintf(full, sizeof full, "%ss", spec);
        len = snprintf(piece, sizeof piece, full, va_arg(ap, const char *));
        break;
      case 'p':
        snprintf(full, sizeof full, "%sp", spec);
        len = snprintf(piece, sizeof piece, full, va_arg(ap, void *));
        break;
      default:
        sm__fatal("format \"%s\": conversion '%%%c' is not supported", fmt, conv ? conv : ' ');
      }
      if (len >= (int)sizeof piece) len = (int)sizeof piece - 1;
    }
    if (len < 0) len = 0;
    if (n + (size_t)len + 1 > cap) {
      while (n + (size_t)len + 1 > cap) cap *= 2;
      char *g = realloc(out, cap);
      if (!g) {
        free(out);
        return NULL;
      }
      out = g;
    }
    memcpy(out + n, piece, (size_t)len);
    n += (size_t)len;
  }
  out[n] = 0;
  return out;
}
#pragma GCC diagnostic pop

static id format_string(id fmt, va_list ap) {
  if (!sm__is_string(fmt))
    sm__fatal("format is %s, not an NSString", fmt ? object_getClassName(fmt) : "nil");
  char *t = format_v(sm__string_utf8(fmt), ap);
  if (!t) sm__fatal("format: out of memory");
  id s = sm__string(t);
  free(t);
  return s;
}
static id string_with_format(id cls, SEL cmd, id fmt, ...) {
  (void)cls;
  (void)cmd;
  va_list ap;
  va_start(ap, fmt);
  id s = format_string(fmt, ap);
  va_end(ap);
  return sm__autorelease(s);
}
static id string_init_format(id self, SEL cmd, id fmt, ...) {
  (void)cmd;
  sm__release(self);
  va_list ap;
  va_start(ap, fmt);
  id s = format_string(fmt, ap);
  va_end(ap);
  return s;
}

SM_EXPORT void NSLog(id fmt, ...);
void NSLog(id fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *t = sm__is_string(fmt) ? format_v(sm__string_utf8(fmt), ap) : NULL;
  va_end(ap);
  if (!t) sm__fatal("NSLog: format is %s, not an NSString", fmt ? object_getClassName(fmt) : "nil");
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  localtime_r(&tv.tv_sec, &tm);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  char exe[256] = "?";
  FILE *f = fopen("/proc/self/comm", "r");
  if (f) {
    if (fgets(exe, sizeof exe, f)) exe[strcspn(exe, "\n")] = 0;
    fclose(f);
  }
  fprintf(stderr, "%s.%03ld %s[%ld:%lx] %s\n", when, (long)tv.tv_usec / 1000, exe, (long)getpid(),
          (unsigned long)pthread_self(), t);
  free(t);
}

/* ------------------------------------------------------------- NSProcessInfo */
/* The macOS version softmetal stands for: 15.0, where residency sets and
 * mathMode came (14.0 with SOFTMETAL_NO_MATH_MODE=1, options as before 15). */
typedef struct {
  NSInteger major, minor, patch;
} os_version;
static os_version os_claimed(void) {
  const char *old = getenv("SOFTMETAL_NO_MATH_MODE");
  os_version v = {15, 0, 0};
  if (old && strcmp(old, "1") == 0) v.major = 14;
  return v;
}
static sm_class process_class = {"NSProcessInfo", sizeof(sm_obj), NULL, Nil, 0};
typedef struct {
  sm_obj hdr;
  id path; /* NSString; nil for the main bundle (the executable's directory) */
} sm_bundle;
static void bundle_destroy(sm_obj *o) { sm__release(((sm_bundle *)o)->path); }
static sm_class bundle_class = {"NSBundle", sizeof(sm_bundle), bundle_destroy, Nil, 0};
static id g_process, g_bundle; /* immortal, made once */
static pthread_once_t g_process_once = PTHREAD_ONCE_INIT, g_bundle_once = PTHREAD_ONCE_INIT;

static void process_make(void) { g_process = sm__immortal(sm__new(&process_class)); }
static void bundle_make(void) { g_bundle = sm__immortal(sm__new(&bundle_class)); }
static id process_info(id cls, SEL cmd) {
  (void)cls;
  (void)cmd;
  pthread_once(&g_process_once, process_make);
  return g_process;
}
static id process_environment(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  id d = sm__dictionary_new(NULL, NULL, 0);
  for (char **e = environ; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    char *name = strndup(*e, (size_t)(eq - *e));
    if (!name) sm__fatal("-[NSProcessInfo environment]: out of memory");
    id k = sm__string(name), v = sm__string(eq + 1);
    if (k && v) dict_put((sm_dict *)d, "environment", k, v);
    sm__release(k);
    sm__release(v);
    free(name);
  }
  return sm__autorelease(d);
}
static id process_arguments(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  FILE *f = fopen("/proc/self/cmdline", "r");
  char *buf = NULL;
  size_t len = 0;
  if (f) {
    size_t cap = 4096;
    buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
      len += got;
      if (len == cap) {
        char *g = realloc(buf, cap *= 2);
        if (!g) {
          free(buf);
          buf = NULL;
          len = 0;
        }
        buf = g;
      }
    }
    fclose(f);
  }
  id arr = sm__array(NULL, 0);
  Class mutable = objc_getClass("NSMutableArray");
  object_setClass(arr, mutable);
  void (*add)(id, SEL, id) = (void (*)(id, SEL, id))(void (*)(void))sm__lookup(arr, "addObject:");
  for (size_t i = 0; i < len;) {
    size_t k = strnlen(buf + i, len - i);
    char *a = strndup(buf + i, k);
    id s = a ? sm__string(a) : nil;
    if (s) add(arr, sel_registerName("addObject:"), s);
    sm__release(s);
    free(a);
    i += k + 1;
  }
  free(buf);
  object_setClass(arr, sm__array_class.objc);
  return sm__autorelease(arr);
}
static id process_name(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  char exe[256] = "";
  FILE *f = fopen("/proc/self/comm", "r");
  if (f) {
    if (fgets(exe, sizeof exe, f)) exe[strcspn(exe, "\n")] = 0;
    fclose(f);
  }
  return sm__autorelease(sm__string(exe));
}
static int process_pid(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return (int)getpid();
}
static os_version process_os_version(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return os_claimed();
}
static BOOL process_at_least(id self, SEL cmd, os_version v) {
  (void)self;
  (void)cmd;
  os_version have = os_claimed();
  if (have.major != v.major) return have.major > v.major;
  if (have.minor != v.minor) return have.minor > v.minor;
  return have.patch >= v.patch;
}
static id process_os_string(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  char t[64];
  os_version v = os_claimed();
  snprintf(t, sizeof t, "Version %ld.%ld (softmetal)", (long)v.major, (long)v.minor);
  return sm__autorelease(sm__string(t));
}
static NSUInteger process_cpu_count(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (NSUInteger)n : 1;
}
static unsigned long long process_memory(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (unsigned long long)pages * (unsigned long long)size : 0;
}

/* ------------------------------------------------------------- NSURL */

static void url_destroy(sm_obj *o) { sm__release(((sm_url *)o)->path); }
sm_class sm__url_class = {"NSURL", sizeof(sm_url), url_destroy, Nil, 0};

static id url_file_with_path(id self, SEL cmd, id path) {
  (void)self;
  if (!sm__is_string(path))
    sm__fatal("+[NSURL %s]: path is %s, not an NSString", sel_getName(cmd),
              path ? object_getClassName(path) : "nil");
  sm_url *u = sm__new(&sm__url_class);
  if (!u) return nil;
  u->path = sm__string_copy(path);
  return sm__autorelease((id)u);
}
static id url_path(id self, SEL cmd) {
  (void)cmd;
  return ((sm_url *)self)->path;
}

/* -[NSURL fileSystemRepresentation]: the path's bytes (file URLs only). */
static const char *url_fs_path(id self, SEL cmd) {
  (void)cmd;
  return sm__string_utf8(((sm_url *)self)->path);
}

/* ------------------------------------------------------------- NSBundle */
/* The main bundle is the executable's directory. */
static char *exe_dir(void) {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return strdup(".");
  path[n] = 0;
  char *slash = strrchr(path, '/');
  if (slash && slash != path)
    *slash = 0;
  else if (slash)
    slash[1] = 0;
  return strdup(path);
}
static id bundle_main(id cls, SEL cmd) {
  (void)cls;
  (void)cmd;
  pthread_once(&g_bundle_once, bundle_make);
  return g_bundle;
}
static id bundle_path(id self, SEL cmd) {
  (void)cmd;
  if (((sm_bundle *)self)->path) return ((sm_bundle *)self)->path;
  char *d = exe_dir();
  if (!d) sm__fatal("-[NSBundle bundlePath]: out of memory");
  id s = sm__string(d);
  free(d);
  return sm__autorelease(s);
}
static id bundle_exe_path(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return nil;
  path[n] = 0;
  return sm__autorelease(sm__string(path));
}
static id bundle_resource(id self, SEL cmd, id name, id type) {
  if (!name) return nil;
  if (!sm__is_string(name) || (type && !sm__is_string(type)))
    sm__fatal("-[NSBundle %s]: name and type must be NSStrings", sel_getName(cmd));
  id own = ((sm_bundle *)self)->path;
  char *d = own ? strdup(sm__string_utf8(own)) : exe_dir();
  if (!d) sm__fatal("-[NSBundle %s]: out of memory", sel_getName(cmd));
  const char *t = type ? sm__string_utf8(type) : "";
  size_t n = strlen(d) + strlen(sm__string_utf8(name)) + strlen(t) + 3;
  char *path = malloc(n);
  if (!path) sm__fatal("-[NSBundle %s]: out of memory", sel_getName(cmd));
  snprintf(path, n, "%s/%s%s%s", d, sm__string_utf8(name), *t && *t != '.' ? "." : "", t);
  free(d);
  id s = access(path, F_OK) == 0 ? sm__autorelease(sm__string(path)) : nil;
  free(path);
  return s;
}
/* initWithPath: a bundle at a directory (nil unless one is there). */
static id bundle_init_path(id self, SEL cmd, id path) {
  struct stat st;
  if (!sm__is_string(path) || stat(sm__string_utf8(path), &st) != 0 || !S_ISDIR(st.st_mode)) {
    if (path && !sm__is_string(path))
      sm__fatal("-[NSBundle %s]: path is %s, not an NSString", sel_getName(cmd),
                object_getClassName(path));
    sm__release(self);
    return nil;
  }
  ((sm_bundle *)self)->path = sm__string_copy(path);
  return self;
}
static id bundle_url(id self, SEL cmd) {
  id path = bundle_path(self, cmd);
  Class url = objc_getClass("NSURL");
  return ((id(*)(id, SEL, id))(void (*)(void))sm__lookup((id)url, "fileURLWithPath:"))(
      (id)url, sel_registerName("fileURLWithPath:"), path);
}
static id bundle_all(id cls, SEL cmd) {
  id main = bundle_main(cls, cmd);
  return sm__autorelease(sm__array(&main, 1));
}
static id bundle_frameworks(id cls, SEL cmd) {
  (void)cls;
  (void)cmd;
  return sm__autorelease(sm__array(NULL, 0)); /* a program on Linux links no frameworks */
}
static id bundle_identifier(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return nil;
}

static id bundle_url_resource(id self, SEL cmd, id name, id ext) {
  id path = bundle_resource(self, cmd, name, ext);
  if (!path) return nil;
  Class url = objc_getClass("NSURL");
  return ((id(*)(id, SEL, id))(void (*)(void))sm__lookup((id)url, "fileURLWithPath:"))(
      (id)url, sel_registerName("fileURLWithPath:"), path);
}

/* ------------------------------------------------------------- paths and files */
/* What Metal programs use to find their library next to the executable:
 * path strings, NSFileManager's checks, files read into strings. */
SM_EXPORT id NSFileType, NSFileTypeRegular, NSFileTypeDirectory, NSFileTypeSymbolicLink,
    NSFileTypeUnknown, NSFileSize;
static id string_with_string(id cls, SEL cmd, id other) {
  (void)cls;
  if (!sm__is_string(other))
    sm__fatal("+[NSString %s]: argument is %s, not an NSString", sel_getName(cmd),
              other ? object_getClassName(other) : "nil");
  return sm__autorelease(sm__string_copy(other));
}
static id str_from(const char *bytes, size_t n) {
  char *t = strndup(bytes, n);
  if (!t) sm__fatal("NSString: out of memory");
  id s = sm__string(t);
  free(t);
  return sm__autorelease(s);
}
static const char *arg_string(id s, const char *cls, SEL cmd) {
  if (!sm__is_string(s))
    sm__fatal("%s %s: argument is %s, not an NSString", cls, sel_getName(cmd),
              s ? object_getClassName(s) : "nil");
  return sm__string_utf8(s);
}
static id string_deleting_last(id self, SEL cmd) {
  const char *p = arg_string(self, "-[NSString", cmd);
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') n--;
  const char *slash = NULL;
  for (size_t i = n; i-- > 0;)
    if (p[i] == '/') {
      slash = p + i;
      break;
    }
  if (!slash) return str_from("", 0);
  size_t k = (size_t)(slash - p);
  while (k > 1 && p[k - 1] == '/') k--;
  return str_from(p, k ? k : 1);
}
static id string_last_component(id self, SEL cmd) {
  const char *p = arg_string(self, "-[NSString", cmd);
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') n--;
  size_t i = n;
  while (i > 0 && p[i - 1] != '/') i--;
  return str_from(p + i, n - i);
}
static id string_path_components(id cls, SEL cmd, id parts) {
  (void)cls;
  NSUInteger n = ((NSUInteger(*)(id, SEL))(void (*)(void))sm__lookup(parts, "count"))(
      parts, sel_registerName("count"));
  id acc = sm__autorelease(sm__string(""));
  for (NSUInteger i = 0; i < n; i++) {
    id part = ((id(*)(id, SEL, NSUInteger))(void (*)(void))sm__lookup(parts, "objectAtIndex:"))(
        parts, sel_registerName("objectAtIndex:"), i);
    arg_string(part, "+[NSString", cmd);
    acc = i == 0 ? part
                 : ((id(*)(id, SEL, id))(void (*)(void))sm__lookup(
                       acc, "stringByAppendingPathComponent:"))(
                       acc, sel_registerName("stringByAppendingPathComponent:"), part);
  }
  return acc;
}
/* The first index UTF-16 units, as a byte count of the UTF-8 text. */
static size_t utf8_prefix(const char *p, NSUInteger units, bool *ok) {
  size_t i = 0;
  NSUInteger u = 0;
  while (p[i] && u < units) {
    unsigned char c = (unsigned char)p[i];
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    u += len == 4 ? 2 : 1;
    i += len;
  }
  *ok = u == units;
  return i;
}
static id string_substring_to(id self, SEL cmd, NSUInteger index) {
  const char *p = arg_string(self, "-[NSString", cmd);
  bool ok;
  size_t n = utf8_prefix(p, index, &ok);
  if (!ok)
    sm__fatal("-[NSString %s]: index %lu is beyond the string's length or inside a surrogate pair",
              sel_getName(cmd), index);
  return str_from(p, n);
}
static id string_substring_from(id self, SEL cmd, NSUInteger index) {
  const char *p = arg_string(self, "-[NSString", cmd);
  bool ok;
  size_t n = utf8_prefix(p, index, &ok);
  if (!ok)
    sm__fatal("-[NSString %s]: index %lu is beyond the string's length or inside a surrogate pair",
              sel_getName(cmd), index);
  return str_from(p + n, strlen(p + n));
}
static void set_cocoa_error(id *error, NSInteger code, const char *what, const char *path) {
  id e = sm__error("NSCocoaErrorDomain", code, "%s '%s': %s", what, path, strerror(errno));
  if (error)
    *error = sm__autorelease(e);
  else
    sm__release(e);
}
static id string_with_file(id cls, SEL cmd, id path, NSUInteger enc, id *error) {
  (void)cls;
  const char *p = arg_string(path, "+[NSString", cmd);
  FILE *f = fopen(p, "rb");
  if (!f) { /* NSFileReadNoSuchFileError 260, else NSFileReadUnknownError 256 */
    set_cocoa_error(error, errno == ENOENT ? 260 : 256, "cannot open", p);
    return nil;
  }
  size_t cap = 1 << 16, n = 0, got;
  char *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      char *g = realloc(buf, cap *= 2);
      if (!g) free(buf);
      buf = g;
    }
  }
  fclose(f);
  if (!buf) sm__fatal("+[NSString %s]: out of memory", sel_getName(cmd));
  id blank = ((id(*)(id, SEL))(void (*)(void))sm__lookup((id)sm__string_class.objc, "alloc"))(
      (id)sm__string_class.objc, sel_registerName("alloc"));
  id s = ((id(*)(id, SEL, const void *, NSUInteger, NSUInteger))(void (*)(void))sm__lookup(
      blank, "initWithBytes:length:encoding:"))(
      blank, sel_registerName("initWithBytes:length:encoding:"), buf, n, enc);
  free(buf);
  if (!s) { /* NSFileReadInapplicableStringEncodingError */
    errno = EILSEQ;
    set_cocoa_error(error, 261, "not text in the encoding asked for:", p);
    return nil;
  }
  return sm__autorelease(s);
}

static sm_class fm_class = {"NSFileManager", sizeof(sm_obj), NULL, Nil, 0};
static id g_fm;
static pthread_once_t g_fm_once = PTHREAD_ONCE_INIT;
static void fm_make(void) { g_fm = sm__immortal(sm__new(&fm_class)); }
static id fm_default(id cls, SEL cmd) {
  (void)cls;
  (void)cmd;
  pthread_once(&g_fm_once, fm_make);
  return g_fm;
}
static BOOL fm_exists(id self, SEL cmd, id path) {
  (void)self;
  struct stat st;
  return stat(arg_string(path, "-[NSFileManager", cmd), &st) == 0;
}
static BOOL fm_readable(id self, SEL cmd, id path) {
  (void)self;
  return access(arg_string(path, "-[NSFileManager", cmd), R_OK) == 0;
}
static id fm_attributes(id self, SEL cmd, id path, id *error) {
  (void)self;
  const char *p = arg_string(path, "-[NSFileManager", cmd);
  struct stat st;
  if (lstat(p, &st) != 0) { /* NSFileReadNoSuchFileError */
    set_cocoa_error(error, 260, "cannot read the attributes of", p);
    return nil;
  }
  id type = S_ISLNK(st.st_mode)   ? NSFileTypeSymbolicLink
            : S_ISDIR(st.st_mode) ? NSFileTypeDirectory
            : S_ISREG(st.st_mode) ? NSFileTypeRegular
                                  : NSFileTypeUnknown;
  id size = sm__number_u64((uint64_t)st.st_size);
  id keys[2] = {NSFileType, NSFileSize}, values[2] = {type, size};
  id d = sm__dictionary_new(keys, values, 2);
  sm__release(size);
  return sm__autorelease(d);
}
static id fm_link_target(id self, SEL cmd, id path, id *error) {
  (void)self;
  const char *p = arg_string(path, "-[NSFileManager", cmd);
  char target[4096];
  ssize_t n = readlink(p, target, sizeof target - 1);
  if (n < 0) {
    set_cocoa_error(error, 256, "cannot read the symbolic link", p);
    return nil;
  }
  return str_from(target, (size_t)n);
}
static id bundle_for_class(id cls, SEL cmd, Class c) {
  (void)c;
  return bundle_main(cls, cmd);
}

/* ------------------------------------------------------------- registration */
void sm__register_ns(void) {
  sm__dictionary_hook = sm__dictionary_new;
  Class c = sm__class_begin(&sm__url_class);
  sm__class_method(c, "fileURLWithPath:", SM_IMP(url_file_with_path), "@@:@");
  sm__method(c, "path", SM_IMP(url_path), "@@:");
  sm__method(c, "fileSystemRepresentation", SM_IMP(url_fs_path), "r*@:");
  sm__class_end(&sm__url_class);
  c = sm__class_begin(&dict_class);
  sm__class_method(c, "dictionary", SM_IMP(dict_empty), "@@:");
  sm__class_method(c, "dictionaryWithObjects:forKeys:count:", SM_IMP(dict_with), "@@:^@^@Q");
  sm__class_method(c, "dictionaryWithObject:forKey:", SM_IMP(dict_with_pair), "@@:@@");
  sm__method(c, "count", SM_IMP(dict_count), "Q@:");
  sm__method(c, "objectForKey:", SM_IMP(dict_get), "@@:@");
  sm__method(c, "objectForKeyedSubscript:", SM_IMP(dict_get), "@@:@");
  sm__method(c, "allKeys", SM_IMP(dict_all_keys), "@@:");
  sm__method(c, "allValues", SM_IMP(dict_all_values), "@@:");
  sm__method(c, "copy", SM_IMP(dict_copy), "@@:");
  sm__method(c, "mutableCopy", SM_IMP(dict_mutable_copy), "@@:");
  sm__method(c, "countByEnumeratingWithState:objects:count:", SM_IMP(dict_enumerate), "Q@:^v^@Q");
  sm__class_end(&dict_class);
  g_mutable_dict = objc_allocateClassPair(c, "NSMutableDictionary", 0);
  if (!g_mutable_dict) sm__fatal("class NSMutableDictionary already exists in this process");
  sm__class_method(g_mutable_dict, "alloc", SM_IMP(dict_alloc), "@@:");
  sm__class_method(g_mutable_dict, "dictionaryWithCapacity:", SM_IMP(dict_with_capacity), "@@:Q");
  sm__method(g_mutable_dict, "initWithCapacity:", SM_IMP(dict_init_capacity), "@@:Q");
  sm__method(g_mutable_dict, "setObject:forKey:", SM_IMP(mdict_set), "v@:@@");
  sm__method(g_mutable_dict, "setObject:forKeyedSubscript:", SM_IMP(mdict_set), "v@:@@");
  sm__method(g_mutable_dict, "removeObjectForKey:", SM_IMP(mdict_remove), "v@:@");
  sm__method(g_mutable_dict, "removeAllObjects", SM_IMP(mdict_remove_all), "v@:");
  objc_registerClassPair(g_mutable_dict);

  c = sm__class_begin(&number_class);
  sm__class_method(c, "numberWithInt:", SM_IMP(num_int), "@@:i");
  sm__class_method(c, "numberWithLong:", SM_IMP(num_long), "@@:q");
  sm__class_method(c, "numberWithLongLong:", SM_IMP(num_llong), "@@:q");
  sm__class_method(c, "numberWithInteger:", SM_IMP(num_long), "@@:q");
  sm__class_method(c, "numberWithUnsignedInt:", SM_IMP(num_uint), "@@:I");
  sm__class_method(c, "numberWithUnsignedLong:", SM_IMP(num_ulong), "@@:Q");
  sm__class_method(c, "numberWithUnsignedLongLong:", SM_IMP(num_ullong), "@@:Q");
  sm__class_method(c, "numberWithUnsignedInteger:", SM_IMP(num_ulong), "@@:Q");
  sm__class_method(c, "numberWithFloat:", SM_IMP(num_float), "@@:f");
  sm__class_method(c, "numberWithDouble:", SM_IMP(num_double), "@@:d");
  sm__class_method(c, "numberWithBool:", SM_IMP(num_bool), "@@:C");
  sm__method(c, "intValue", SM_IMP(num_int_value), "i@:");
  sm__method(c, "longValue", SM_IMP(num_long_value), "q@:");
  sm__method(c, "longLongValue", SM_IMP(num_llong_value), "q@:");
  sm__method(c, "integerValue", SM_IMP(num_long_value), "q@:");
  sm__method(c, "unsignedIntValue", SM_IMP(num_uint_value), "I@:");
  sm__method(c, "unsignedLongValue", SM_IMP(num_ulong_value), "Q@:");
  sm__method(c, "unsignedLongLongValue", SM_IMP(num_ullong_value), "Q@:");
  sm__method(c, "unsignedIntegerValue", SM_IMP(num_ulong_value), "Q@:");
  sm__method(c, "floatValue", SM_IMP(num_float_value), "f@:");
  sm__method(c, "doubleValue", SM_IMP(num_double_value), "d@:");
  sm__method(c, "boolValue", SM_IMP(num_bool_value), "C@:");
  sm__method(c, "isEqual:", SM_IMP(num_is_equal), "C@:@");
  sm__method(c, "isEqualToNumber:", SM_IMP(num_is_equal), "C@:@");
  sm__method(c, "hash", SM_IMP(num_hash), "Q@:");
  sm__method(c, "description", SM_IMP(num_description), "@@:");
  sm__method(c, "stringValue", SM_IMP(num_description), "@@:");
  sm__method(c, "copy", SM_IMP(retain_self), "@@:");
  sm__class_end(&number_class);

  c = sm__class_begin(&lock_class);
  sm__method(c, "init", SM_IMP(lock_init), "@@:");
  sm__method(c, "lock", SM_IMP(lock_lock), "v@:");
  sm__method(c, "unlock", SM_IMP(lock_unlock), "v@:");
  sm__method(c, "tryLock", SM_IMP(lock_try), "C@:");
  sm__class_end(&lock_class);

  c = sm__class_begin(&pool_class);
  sm__method(c, "init", SM_IMP(pool_init), "@@:");
  sm__method(c, "drain", SM_IMP(pool_drain), "v@:");
  sm__method(c, "release", SM_IMP(pool_drain), "v@:");
  sm__method(c, "retain", SM_IMP(pool_refuse), "@@:");
  sm__method(c, "autorelease", SM_IMP(pool_refuse), "@@:");
  sm__class_end(&pool_class);

  c = sm__class_begin(&process_class);
  sm__class_method(c, "processInfo", SM_IMP(process_info), "@@:");
  sm__method(c, "environment", SM_IMP(process_environment), "@@:");
  sm__method(c, "arguments", SM_IMP(process_arguments), "@@:");
  sm__method(c, "processName", SM_IMP(process_name), "@@:");
  sm__method(c, "processIdentifier", SM_IMP(process_pid), "i@:");
  sm__method(c, "operatingSystemVersion", SM_IMP(process_os_version), "{?=qqq}@:");
  sm__method(c, "operatingSystemVersionString", SM_IMP(process_os_string), "@@:");
  sm__method(c, "isOperatingSystemAtLeastVersion:", SM_IMP(process_at_least), "C@:{?=qqq}");
  sm__method(c, "processorCount", SM_IMP(process_cpu_count), "Q@:");
  sm__method(c, "activeProcessorCount", SM_IMP(process_cpu_count), "Q@:");
  sm__method(c, "physicalMemory", SM_IMP(process_memory), "Q@:");
  sm__class_end(&process_class);

  c = sm__class_begin(&bundle_class);
  sm__class_method(c, "mainBundle", SM_IMP(bundle_main), "@@:");
  sm__method(c, "bundlePath", SM_IMP(bundle_path), "@@:");
  sm__method(c, "resourcePath", SM_IMP(bundle_path), "@@:");
  sm__method(c, "executablePath", SM_IMP(bundle_exe_path), "@@:");
  sm__method(c, "pathForResource:ofType:", SM_IMP(bundle_resource), "@@:@@");
  sm__method(c, "initWithPath:", SM_IMP(bundle_init_path), "@@:@");
  sm__method(c, "bundleURL", SM_IMP(bundle_url), "@@:");
  sm__method(c, "resourceURL", SM_IMP(bundle_url), "@@:");
  sm__method(c, "bundleIdentifier", SM_IMP(bundle_identifier), "@@:");
  sm__class_method(c, "allBundles", SM_IMP(bundle_all), "@@:");
  sm__class_method(c, "allFrameworks", SM_IMP(bundle_frameworks), "@@:");
  sm__method(c, "URLForResource:withExtension:", SM_IMP(bundle_url_resource), "@@:@@");
  sm__class_end(&bundle_class);

  sm__class_method(c, "bundleForClass:", SM_IMP(bundle_for_class), "@@:#");

  Class str = sm__string_class.objc;
  sm__class_method(str, "stringWithFormat:", SM_IMP(string_with_format), "@@:@");
  sm__method(str, "initWithFormat:", SM_IMP(string_init_format), "@@:@");
  sm__class_method(str, "pathWithComponents:", SM_IMP(string_path_components), "@@:@");
  sm__class_method(str, "stringWithString:", SM_IMP(string_with_string), "@@:@");
  sm__class_method(str, "stringWithContentsOfFile:encoding:error:", SM_IMP(string_with_file),
                   "@@:@Q^@");
  sm__method(str, "stringByDeletingLastPathComponent", SM_IMP(string_deleting_last), "@@:");
  sm__method(str, "lastPathComponent", SM_IMP(string_last_component), "@@:");
  sm__method(str, "substringToIndex:", SM_IMP(string_substring_to), "@@:Q");
  sm__method(str, "substringFromIndex:", SM_IMP(string_substring_from), "@@:Q");
  Class lit = objc_getClass("NXConstantString");
  if (lit) { /* none of these is GNU libobjc's own (see sm_foundation.c) */
    class_addMethod(lit, sel_registerName("stringByDeletingLastPathComponent"),
                    SM_IMP(string_deleting_last), "@@:");
    class_addMethod(lit, sel_registerName("lastPathComponent"), SM_IMP(string_last_component),
                    "@@:");
    class_addMethod(lit, sel_registerName("substringToIndex:"), SM_IMP(string_substring_to),
                    "@@:Q");
    class_addMethod(lit, sel_registerName("substringFromIndex:"), SM_IMP(string_substring_from),
                    "@@:Q");
  }
  static id *const keys[] = {&NSFileType,          &NSFileTypeRegular,
                             &NSFileTypeDirectory, &NSFileTypeSymbolicLink,
                             &NSFileTypeUnknown,   &NSFileSize};
  static const char *const names[] = {"NSFileType",          "NSFileTypeRegular",
                                      "NSFileTypeDirectory", "NSFileTypeSymbolicLink",
                                      "NSFileTypeUnknown",   "NSFileSize"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    *keys[i] = sm__immortal(sm__string(names[i]));
  c = sm__class_begin(&fm_class);
  sm__class_method(c, "defaultManager", SM_IMP(fm_default), "@@:");
  sm__method(c, "fileExistsAtPath:", SM_IMP(fm_exists), "C@:@");
  sm__method(c, "isReadableFileAtPath:", SM_IMP(fm_readable), "C@:@");
  sm__method(c, "attributesOfItemAtPath:error:", SM_IMP(fm_attributes), "@@:@^@");
  sm__method(c, "destinationOfSymbolicLinkAtPath:error:", SM_IMP(fm_link_target), "@@:@^@");
  sm__class_end(&fm_class);
}

/* Objective-C built for GCC's runtime ABI (clang -fobjc-runtime=gcc) links
 * against __objc_class_name_<Class> for each class it names: softmetal
 * defines them for the classes programs create by name. */
#define SM_CLASS_NAME_SYMBOL(c)                                                                    \
  SM_EXPORT const char __objc_class_name_##c;                                                      \
  const char __objc_class_name_##c = 0;
SM_CLASS_NAME_SYMBOL(NSObject)
SM_CLASS_NAME_SYMBOL(NSString)
SM_CLASS_NAME_SYMBOL(NSError)
SM_CLASS_NAME_SYMBOL(NSArray)
SM_CLASS_NAME_SYMBOL(NSMutableArray)
SM_CLASS_NAME_SYMBOL(NSDictionary)
SM_CLASS_NAME_SYMBOL(NSMutableDictionary)
SM_CLASS_NAME_SYMBOL(NSNumber)
SM_CLASS_NAME_SYMBOL(NSLock)
SM_CLASS_NAME_SYMBOL(NSAutoreleasePool)
SM_CLASS_NAME_SYMBOL(NSProcessInfo)
SM_CLASS_NAME_SYMBOL(NSBundle)
SM_CLASS_NAME_SYMBOL(NSURL)
SM_CLASS_NAME_SYMBOL(NSFileManager)
SM_CLASS_NAME_SYMBOL(MTLCompileOptions)
SM_CLASS_NAME_SYMBOL(MTLFunctionConstantValues)
SM_CLASS_NAME_SYMBOL(MTLFunctionDescriptor)
SM_CLASS_NAME_SYMBOL(MTLLinkedFunctions)
SM_CLASS_NAME_SYMBOL(MTLComputePipelineDescriptor)
SM_CLASS_NAME_SYMBOL(MTLBinaryArchiveDescriptor)
SM_CLASS_NAME_SYMBOL(MTLHeapDescriptor)
SM_CLASS_NAME_SYMBOL(MTLResidencySetDescriptor)
SM_CLASS_NAME_SYMBOL(MTLCommandBufferDescriptor)
SM_CLASS_NAME_SYMBOL(MTLSharedEventListener)
SM_CLASS_NAME_SYMBOL(MTLCaptureManager)
SM_CLASS_NAME_SYMBOL(MTLCaptureDescriptor)
