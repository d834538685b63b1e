/* SPDX-License-Identifier: MIT */
/* softmetal's library constructor: MTLCompileOptions, libraries (checked by
 * sm_compile.c when made), functions, function constants, and compute
 * pipeline states, whose function's code is generated when the first one is
 * made. */
#define _GNU_SOURCE /* posix_spawn extras, strdup */
#include "sm_internal.h"
#include "sm_compile.h"
#include "sm_front.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIB_ERROR_DOMAIN "MTLLibraryErrorDomain"
enum { LIB_ERROR_COMPILE_FAILURE = 3, LIB_ERROR_INTERNAL = 2 };
/* MTLMathMode (NSInteger): the compile flags of each are in sm_compile.c. */
enum { MATH_MODE_SAFE = 0, MATH_MODE_RELAXED = 1, MATH_MODE_FAST = 2 };
/* MTLMathFloatingPointFunctions (NSInteger, macOS 15): which exp, log...
 * unqualified calls get; Fast is the default of MTLCompileOptions. Without
 * mathMode (SOFTMETAL_NO_MATH_MODE=1, as before macOS 15) they follow
 * fastMathEnabled. */
enum { FP_FUNCTIONS_FAST = 0, FP_FUNCTIONS_PRECISE = 1 };
static bool g_no_math_mode; /* SOFTMETAL_NO_MATH_MODE=1 */

/* ------------------------------------------------------------- objects */
/* A kernel's generated code: its own shared object, made when the first
 * pipeline of the function is (sm_compile.c). */
typedef struct {
  void *dl;
  const struct sm_kernel_desc *desc; /* the object's table entry: fn, written_mask */
  void (*constant_value)(const unsigned char *v, const unsigned char *d, unsigned pos, void *out);
  unsigned long long (*tg_static_bytes)(unsigned kernel);
  sm_code code; /* the kernel cache's files of it (binary archives) */
  char *path;
  /* Its tracked code (concurrent passes), made at first need. */
  void *tracked_dl;
  sm_kernel_fn tracked_fn, tracked_group_fn;
} sm_fn_code;

typedef struct {
  sm_obj hdr;
  id device;
  sm_compiled_library cl;               /* the checked source and its manifest */
  const struct sm_kernel_desc *kernels; /* cl.kernels: fn NULL, written_mask 0 */
  unsigned n;
  const struct sm_constant_desc *constants;
  unsigned n_constants;
  pthread_mutex_t lock; /* code[] */
  sm_fn_code *code;     /* [n], filled as pipelines are made */
  bool logging;         /* MTLCompileOptions.enableLogging (Metal 3.2): os_log prints */
} sm_library;

typedef struct {
  sm_obj hdr;
  sm_library *library;
  const struct sm_kernel_desc *desc;
  id name;
  bool specialized;                      /* made by newFunctionWithName:constantValues:error: */
  unsigned char *fc_values, *fc_defined; /* [n_constants][SM_FC_SLOT], [n_constants] */
} sm_function;

/* MTLFunctionConstantValues: values by index or by name, last one wins. */
typedef struct {
  NSUInteger index; /* when name is NULL */
  char *name;
  NSUInteger type; /* MTLDataType */
  unsigned char value[SM_FC_SLOT];
} fc_entry;
typedef struct {
  sm_obj hdr;
  fc_entry *e;
  size_t n;
} sm_constant_values;

/* MTLCompileOptions: only the math settings are kept; mathMode is the
 * truth, fastMathEnabled its older view (YES for Relaxed and Fast). */
typedef struct {
  sm_obj hdr;
  NSInteger math_mode;
  NSInteger fp_functions;      /* MTLMathFloatingPointFunctions: Fast 0 (default), Precise 1 */
  NSUInteger language_version; /* MTLLanguageVersion (major << 16 | minor); 0: newest */
  bool initialized;            /* alloc without init is misuse */
} sm_compile_options;

/* MTLLanguageVersion values (Apple's MTLLibrary.h), as __METAL_VERSION__
 * (major * 100 + minor * 10); 0 when the value is none of them. */
static unsigned metal_version_of(NSUInteger v) {
  static const NSUInteger known[] = {0x10000, 0x10001, 0x10002, 0x20000, 0x20001, 0x20002,
                                     0x20003, 0x20004, 0x30000, 0x30001, 0x30002, 0x40000};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (v == known[i]) return (unsigned)((v >> 16) * 100 + (v & 0xffff) * 10);
  return 0;
}

static sm_class options_class = {"MTLCompileOptions", sizeof(sm_compile_options), NULL, Nil, 0};

static id options_init(id self, SEL cmd) {
  (void)cmd;
  ((sm_compile_options *)self)->math_mode = MATH_MODE_FAST;       /* Metal's default */
  ((sm_compile_options *)self)->fp_functions = FP_FUNCTIONS_FAST; /* Metal's default */
  ((sm_compile_options *)self)->initialized = true;
  return self;
}
static BOOL options_fast_math(id self, SEL cmd) {
  (void)cmd;
  return ((sm_compile_options *)self)->math_mode != MATH_MODE_SAFE;
}
/* fastMathEnabled sets both: before macOS 15 it was the only switch, and
 * NO meant the precise functions too. */
static void options_set_fast_math(id self, SEL cmd, BOOL enabled) {
  (void)cmd;
  ((sm_compile_options *)self)->math_mode = enabled ? MATH_MODE_FAST : MATH_MODE_SAFE;
  ((sm_compile_options *)self)->fp_functions = enabled ? FP_FUNCTIONS_FAST : FP_FUNCTIONS_PRECISE;
}
static NSInteger options_fp_functions(id self, SEL cmd) {
  (void)cmd;
  return ((sm_compile_options *)self)->fp_functions;
}
static void options_set_fp_functions(id self, SEL cmd, NSInteger f) {
  if (f != FP_FUNCTIONS_FAST && f != FP_FUNCTIONS_PRECISE)
    sm__fatal("-[MTLCompileOptions %s]: mathFloatingPointFunctions = %ld is not an "
              "MTLMathFloatingPointFunctions (Fast 0, Precise 1)",
              sel_getName(cmd), (long)f);
  ((sm_compile_options *)self)->fp_functions = f;
}
static NSUInteger options_language_version(id self, SEL cmd) {
  (void)cmd;
  return ((sm_compile_options *)self)->language_version;
}
static void options_set_language_version(id self, SEL cmd, NSUInteger v) {
  (void)cmd;
  ((sm_compile_options *)self)->language_version = v; /* checked when compiling, as Metal */
}
static NSInteger options_math_mode(id self, SEL cmd) {
  (void)cmd;
  return ((sm_compile_options *)self)->math_mode;
}
static void options_set_math_mode(id self, SEL cmd, NSInteger mode) {
  if (mode < MATH_MODE_SAFE || mode > MATH_MODE_FAST)
    sm__fatal("-[MTLCompileOptions %s]: mathMode = %ld is not an MTLMathMode "
              "(Safe 0, Relaxed 1, Fast 2)",
              sel_getName(cmd), (long)mode);
  ((sm_compile_options *)self)->math_mode = mode;
}

static void library_destroy(sm_obj *o) {
  sm_library *l = (sm_library *)o;
  for (unsigned i = 0; l->code && i < l->n; i++) {
    if (l->code[i].dl) dlclose(l->code[i].dl);
    if (l->code[i].tracked_dl) dlclose(l->code[i].tracked_dl);
    free(l->code[i].path);
  }
  free(l->code);
  pthread_mutex_destroy(&l->lock);
  sm__compiled_library_free(&l->cl);
  sm__release(l->device);
}
static void function_destroy(sm_obj *o) {
  sm_function *f = (sm_function *)o;
  free(f->fc_values);
  free(f->fc_defined);
  sm__release(f->name);
  sm__release((id)f->library);
}
static void pipeline_destroy(sm_obj *o) { sm__release(((sm_pipeline *)o)->function); }

static sm_class library_class = {"SMLibrary", sizeof(sm_library), library_destroy, Nil, 0};
static sm_class function_class = {"SMFunction", sizeof(sm_function), function_destroy, Nil, 0};
static void values_destroy(sm_obj *o) {
  sm_constant_values *v = (sm_constant_values *)o;
  for (size_t i = 0; i < v->n; i++) free(v->e[i].name);
  free(v->e);
}
static sm_class values_class = {"MTLFunctionConstantValues", sizeof(sm_constant_values),
                                values_destroy, Nil, 0};
sm_class sm__pipeline_class = {"SMComputePipelineState", sizeof(sm_pipeline), pipeline_destroy, Nil,
                               0};

static void set_error(id *error, id e) {
  if (error)
    *error = sm__autorelease(e);
  else
    sm__release(e);
}

id sm__device_new_library(id self, SEL cmd, id source, id options, id *error) {
  if (options && !sm__is(options, &options_class))
    sm__fatal("-[SMDevice %s]: options is a %s, not an MTLCompileOptions", sel_getName(cmd),
              object_getClassName(options));
  if (options && !((sm_compile_options *)options)->initialized)
    sm__fatal("-[SMDevice %s]: options was allocated but never sent init", sel_getName(cmd));
  NSInteger math_mode = options ? ((sm_compile_options *)options)->math_mode : MATH_MODE_FAST;
  const bool fast_functions =
      !options         ? true
      : g_no_math_mode ? math_mode != MATH_MODE_SAFE
                       : ((sm_compile_options *)options)->fp_functions == FP_FUNCTIONS_FAST;
  const NSUInteger language = options ? ((sm_compile_options *)options)->language_version : 0;
  const unsigned metal_version = metal_version_of(language);
  const char *text = sm__string_utf8(source);
  if (!text) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE, "%s: source = nil",
                               sel_getName(cmd)));
    return nil;
  }
  if (language != 0 && metal_version == 0) {
    set_error(error,
              sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                        "%s: languageVersion = 0x%lx (%lu.%lu) is not an MTLLanguageVersion "
                        "(1.0 to 1.2, 2.0 to 2.4, 3.0 to 3.2, 4.0)",
                        sel_getName(cmd), (unsigned long)language, (unsigned long)(language >> 16),
                        (unsigned long)(language & 0xffff)));
    return nil;
  }
  char *diag = NULL;
  bool internal = false;
  sm_compiled_library cl;
  if (!sm__compile_library(text, (int)math_mode, fast_functions, metal_version, &cl, &diag,
                           &internal)) {
    set_error(error,
              sm__error(LIB_ERROR_DOMAIN, internal ? LIB_ERROR_INTERNAL : LIB_ERROR_COMPILE_FAILURE,
                        "%s: %s:\n%s", sel_getName(cmd),
                        internal ? "softmetal cannot compile" : "compilation failed",
                        diag ? diag : "?"));
    free(diag);
    return nil;
  }
  sm_library *l = sm__new(&library_class);
  sm_fn_code *code = l ? calloc(cl.n_kernels ? cl.n_kernels : 1, sizeof *code) : NULL;
  if (!code) {
    if (l) sm__release((id)l);
    sm__compiled_library_free(&cl);
    return nil;
  }
  l->cl = cl;
  l->code = code;
  pthread_mutex_init(&l->lock, NULL);
  l->device = sm__retain(self);
  l->kernels = l->cl.kernels;
  l->n = l->cl.n_kernels;
  l->constants = l->cl.constants;
  l->n_constants = l->cl.n_constants;
  /* kept by sm_host.c; NO by default, as Metal, where os_log then prints nothing */
  l->logging = options && ((BOOL(*)(id, SEL))(void (*)(void))sm__lookup(options, "enableLogging"))(
                              options, sel_registerName("enableLogging"));
  if (math_mode != MATH_MODE_SAFE) atomic_fetch_add(&sm__unsafe_math_libraries, 1);
  return (id)l;
}

/* Kernel i's code, generated (or taken from the cache) on first use. NULL
 * with *diag on failure. */
static const sm_fn_code *function_code(sm_library *l, unsigned i, char **diag) {
  pthread_mutex_lock(&l->lock);
  sm_fn_code *c = &l->code[i];
  if (c->dl) {
    pthread_mutex_unlock(&l->lock);
    return c;
  }
  void *dl = sm__compile_function(&l->cl, i, false, diag);
  if (!dl) {
    pthread_mutex_unlock(&l->lock);
    return NULL;
  }
  const unsigned *abi = dlsym(dl, "softmetal_abi_version");
  const unsigned *count = dlsym(dl, "softmetal_kernel_count");
  const struct sm_kernel_desc *kernels = dlsym(dl, "softmetal_kernels");
  void *value_fn = dlsym(dl, "softmetal_constant_value");
  void *tg_fn = dlsym(dl, "softmetal_tg_static_bytes");
  if (!abi || *abi != SM_ABI_VERSION || !count || *count != l->n || !kernels || !value_fn ||
      !tg_fn || strcmp(kernels[i].name, l->kernels[i].name) != 0 || !kernels[i].fn) {
    dlclose(dl);
    pthread_mutex_unlock(&l->lock);
    sm_text b = {0};
    sm__text_printf(&b, "the code of function '%s' has no kernel table of ABI %u",
                    l->kernels[i].name, SM_ABI_VERSION);
    *diag = b.p;
    return NULL;
  }
  c->desc = &kernels[i];
  memcpy(&c->constant_value, &value_fn, sizeof value_fn);
  memcpy(&c->tg_static_bytes, &tg_fn, sizeof tg_fn);
  sm_digest key;
  sm__function_key(&l->cl, i, false, &key, &c->path);
  memcpy(c->code.key, key.d, 32);
  c->code.path = c->path;
  memcpy(c->code.library_key, l->cl.key.d, 32);
  c->code.library_path = l->cl.path;
  memcpy(c->code.compiler_key, l->cl.compiler_key.d, 32);
  c->code.compiler_path = l->cl.compiler_path;
  c->dl = dl; /* last: the entry is complete */
  pthread_mutex_unlock(&l->lock);
  return c;
}

bool sm__pipeline_tracked(sm_pipeline *p, char **diag) {
  if (atomic_load(&p->tracked_ready)) return true;
  sm_function *f = (sm_function *)p->function;
  sm_library *l = f->library;
  unsigned i = (unsigned)(f->desc - l->kernels);
  pthread_mutex_lock(&l->lock);
  sm_fn_code *c = &l->code[i];
  if (!c->tracked_dl) {
    void *dl = sm__compile_function(&l->cl, i, true, diag);
    const struct sm_kernel_desc *kernels = dl ? dlsym(dl, "softmetal_kernels") : NULL;
    void *hook = dl ? dlsym(dl, "softmetal_touch") : NULL;
    long *window = dl ? dlsym(dl, "softmetal_touch_window") : NULL;
    if (dl && (!kernels || !hook || !window || strcmp(kernels[i].name, l->kernels[i].name) != 0 ||
               !kernels[i].fn)) {
      dlclose(dl);
      dl = NULL;
      sm_text b = {0};
      sm__text_printf(&b, "the tracked code of function '%s' has no kernel table or no hook",
                      l->kernels[i].name);
      *diag = b.p;
    }
    if (!dl) {
      pthread_mutex_unlock(&l->lock);
      return false;
    }
    void (*touch)(unsigned long, unsigned long, int) = sm__touch;
    memcpy(hook, &touch, sizeof touch);
    *window = sm__touch_window();
    c->tracked_fn = kernels[i].fn;
    c->tracked_group_fn = kernels[i].group_fn;
    c->tracked_dl = dl;
  }
  p->tracked_fn = c->tracked_fn;
  p->tracked_group_fn = c->tracked_group_fn;
  atomic_store(&p->tracked_ready, true);
  pthread_mutex_unlock(&l->lock);
  return true;
}

static const struct sm_kernel_desc *find_kernel(sm_library *l, const char *n) {
  for (unsigned i = 0; n && i < l->n; i++)
    if (strcmp(l->kernels[i].name, n) == 0) return &l->kernels[i];
  return NULL;
}

static sm_function *new_function(sm_library *l, const struct sm_kernel_desc *k) {
  sm_function *f = sm__new(&function_class);
  if (!f) return NULL;
  f->library = (sm_library *)sm__retain((id)l);
  f->desc = k;
  f->name = sm__string(k->name);
  return f;
}

static id library_new_function(id self, SEL cmd, id name) {
  (void)cmd;
  sm_library *l = (sm_library *)self;
  const struct sm_kernel_desc *k = find_kernel(l, sm__string_utf8(name));
  return k ? (id)new_function(l, k) : nil;
}

/* MTLDataType: bytes of one value as the host gives it, 0 when unsupported. */
static size_t data_type_size(NSUInteger t) {
  static const struct {
    NSUInteger base;
    size_t esize;
  } V[] = {{3, 4}, {16, 2}, {29, 4}, {33, 4}, {37, 2}, {41, 2}, {45, 1}, {49, 1}, {53, 1}};
  if (t == 81 || t == 85) return 8; /* Long, ULong */
  /* 3-vectors take four elements, as simd_float3 and MSL's float3 */
  for (size_t i = 0; i < sizeof V / sizeof *V; i++)
    if (t >= V[i].base && t < V[i].base + 4) {
      size_t w = t - V[i].base + 1;
      return V[i].esize * (w == 3 ? 4 : w);
    }
  return 0;
}

/* The MSL name of a scalar MTLDataType, or "MTLDataType <n>". */
static const char *data_type_name(uint32_t t) {
  switch (t) {
  case 3: return "float";
  case 16: return "half";
  case 29: return "int";
  case 33: return "uint";
  case 37: return "short";
  case 41: return "ushort";
  case 45: return "char";
  case 49: return "uchar";
  case 53: return "bool";
  case 81: return "long";
  case 85: return "ulong";
  case 121: return "bfloat";
  default: return "another MTLDataType";
  }
}

static const fc_entry *find_value(const sm_constant_values *v, const struct sm_constant_desc *c) {
  for (size_t i = v ? v->n : 0; i-- > 0;)
    if (!v->e[i].name && v->e[i].index == c->index) return &v->e[i];
  for (size_t i = v ? v->n : 0; i-- > 0;)
    if (v->e[i].name && strcmp(v->e[i].name, c->name) == 0) return &v->e[i];
  return NULL;
}

/* Folding a guard (the front end's G lines: tokens separated by spaces)
 * with the given values: integer and bool constants with values, integer
 * literals, true/false, ! && || comparisons + - and parentheses. Anything
 * else, or a constant without a value, cannot be folded. */
typedef struct {
  const char *p;
  const sm_library *l;
  const unsigned char *vals, *defined;
  bool bad;
} fold_state;

static bool fold_next(fold_state *s, char *w, size_t cap) {
  while (*s->p == ' ') s->p++;
  size_t n = strcspn(s->p, " ");
  if (n == 0 || n >= cap) return false;
  memcpy(w, s->p, n);
  w[n] = 0;
  return true;
}
static bool fold_take(fold_state *s, const char *t) {
  char w[128];
  if (!fold_next(s, w, sizeof w) || strcmp(w, t) != 0) return false;
  while (*s->p == ' ') s->p++;
  s->p += strlen(t);
  return true;
}
static long long fold_or(fold_state *s);
static long long fold_unary(fold_state *s) {
  char w[128];
  if (s->bad || !fold_next(s, w, sizeof w)) {
    s->bad = true;
    return 0;
  }
  if (fold_take(s, "!")) return !fold_unary(s);
  if (fold_take(s, "-")) return -fold_unary(s);
  if (fold_take(s, "(")) {
    long long v = fold_or(s);
    if (!fold_take(s, ")")) s->bad = true;
    return v;
  }
  fold_take(s, w);
  if (strcmp(w, "true") == 0) return 1;
  if (strcmp(w, "false") == 0) return 0;
  if (isdigit((unsigned char)w[0])) return strtoll(w, NULL, 10);
  for (unsigned c = 0; c < s->l->n_constants; c++) {
    const struct sm_constant_desc *cd = &s->l->constants[c];
    if (strcmp(cd->name, w) != 0) continue;
    if (cd->index == UINT32_MAX || !s->defined[c]) break;
    const unsigned char *v = s->vals + (size_t)c * SM_FC_SLOT;
    switch (cd->type) {
    case 53:
    case 49: return v[0];              /* bool, uchar */
    case 45: return (signed char)v[0]; /* char */
    case 37: {
      int16_t x;
      memcpy(&x, v, 2);
      return x;
    }
    case 41: {
      uint16_t x;
      memcpy(&x, v, 2);
      return x;
    }
    case 29: {
      int32_t x;
      memcpy(&x, v, 4);
      return x;
    }
    case 33: {
      uint32_t x;
      memcpy(&x, v, 4);
      return x;
    }
    case 81:
    case 85: {
      long long x;
      memcpy(&x, v, 8);
      return x;
    }
    default: break;
    }
    break;
  }
  s->bad = true;
  return 0;
}
static long long fold_add(fold_state *s) {
  long long v = fold_unary(s);
  for (;;) {
    if (fold_take(s, "+"))
      v += fold_unary(s);
    else if (fold_take(s, "-"))
      v -= fold_unary(s);
    else
      return v;
  }
}
static long long fold_cmp(fold_state *s) {
  long long v = fold_add(s);
  for (;;) {
    if (fold_take(s, "=="))
      v = v == fold_add(s);
    else if (fold_take(s, "!="))
      v = v != fold_add(s);
    else if (fold_take(s, "<="))
      v = v <= fold_add(s);
    else if (fold_take(s, ">="))
      v = v >= fold_add(s);
    else if (fold_take(s, "<"))
      v = v < fold_add(s);
    else if (fold_take(s, ">"))
      v = v > fold_add(s);
    else
      return v;
  }
}
static long long fold_and(fold_state *s) {
  long long v = fold_cmp(s);
  while (fold_take(s, "&&")) {
    long long r = fold_cmp(s); /* folded whole: a guard has no side effects */
    v = v && r;
  }
  return v;
}
static long long fold_or(fold_state *s) {
  long long v = fold_and(s);
  while (fold_take(s, "||")) {
    long long r = fold_and(s);
    v = v || r;
  }
  return v;
}

/* Whether kernel k still uses constant c once the given values are folded:
 * false only when every use is under a guard that folds to false. */
static bool constant_still_used(const sm_library *l, const struct sm_kernel_desc *k, unsigned c,
                                const unsigned char *vals, const unsigned char *defined) {
  unsigned ki = (unsigned)(k - l->kernels);
  const char *g = l->cl.fc_guards ? l->cl.fc_guards[ki] : NULL;
  for (uint32_t j = 0; g && j < l->cl.fc_guard_count[ki]; j++, g += strlen(g) + 3) {
    char *end;
    unsigned long gc = strtoul(g, &end, 10);
    if (gc != c) continue;
    fold_state s = {end, l, vals, defined, false};
    long long v = fold_or(&s);
    while (*s.p == ' ') s.p++;
    return s.bad || *s.p || v != 0;
  }
  return true;
}

/* Specializes a kernel: values are looked up by index, then by name; values
 * that match no constant are ignored; a required constant the kernel uses
 * must have a value of its type, unless every use of it is under an
 * `if` whose constant condition the given values make false (Metal
 * specializes by folding the constants; the dead use goes with it). A
 * used one without a value is an error under MTL_DEBUG_LAYER=1 and, as on
 * a Mac without the validation layer, 0 (counted, warned once) otherwise. */
static id library_new_function_constants(id self, SEL cmd, id name, id values, id *error) {
  sm_library *l = (sm_library *)self;
  const char *n = sm__string_utf8(name);
  if (values && !sm__is(values, &values_class))
    sm__fatal("-[SMLibrary %s]: constantValues is a %s, not an MTLFunctionConstantValues",
              sel_getName(cmd), object_getClassName(values));
  const struct sm_kernel_desc *k = find_kernel(l, n);
  if (!k) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_INTERNAL,
                               "%s: function '%s' was not found in the library", sel_getName(cmd),
                               n ? n : "(nil)"));
    return nil;
  }
  const sm_constant_values *v = (const sm_constant_values *)values;
  size_t nc = l->n_constants ? l->n_constants : 1;
  unsigned char *vals = calloc(nc, SM_FC_SLOT), *defined = calloc(nc, 1);
  if (!vals || !defined) {
    free(vals);
    free(defined);
    return nil;
  }
  for (unsigned c = 0; c < l->n_constants; c++) {
    const struct sm_constant_desc *cd = &l->constants[c];
    if (cd->index == UINT32_MAX) continue;
    const fc_entry *e = find_value(v, cd);
    if (e && e->type != cd->type) {
      set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                                 "%s: function constant '%s' (index %u) of function '%s' has "
                                 "MTLDataType %u, but its value was given as MTLDataType %lu",
                                 sel_getName(cmd), cd->name, cd->index, n, cd->type,
                                 (unsigned long)e->type));
      goto fail;
    }
    if (e) {
      memcpy(vals + (size_t)c * SM_FC_SLOT, e->value, SM_FC_SLOT);
      defined[c] = 1;
    }
  }
  for (unsigned c = 0; c < l->n_constants; c++) {
    const struct sm_constant_desc *cd = &l->constants[c];
    if (cd->index == UINT32_MAX || defined[c] || cd->optional) continue;
    bool used = false;
    for (uint32_t u = 0; u < k->fc_used_count; u++) used = used || k->fc_used[u] == c;
    if (!used || !constant_still_used(l, k, c, vals, defined)) continue;
    if (!sm__debug_layer()) {
      /* Apple documents that required constants need values, but a Mac
       * without the validation layer specializes without one (ggml's
       * kernel_bin_fuse for ACC gives no FC_bin_cb, which it reads): the
       * constant reads as 0 (false), counted and warned about once. */
      char what[300];
      snprintf(what, sizeof what,
               "%s: function constant '%s' (index %u) is required by function '%s' and "
               "has no value; it reads as 0",
               sel_getName(cmd), cd->name, cd->index, n);
      sm__lenient(SM_LENIENT_FC_VALUE, what);
      continue;
    }
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: function constant '%s' (index %u) is required by function "
                               "'%s' and has no value (give one by index or name, or test "
                               "it with is_function_constant_defined)",
                               sel_getName(cmd), cd->name, cd->index, n));
    goto fail;
  }
  sm_function *f = new_function(l, k);
  if (!f) goto fail;
  f->specialized = true;
  f->fc_values = vals;
  f->fc_defined = defined;
  return (id)f;
fail:
  free(vals);
  free(defined);
  return nil;
}

static id values_init(id self, SEL cmd) {
  (void)cmd;
  return self;
}

static void values_add(id self, const void *value, NSUInteger type, NSUInteger index,
                       const char *name, SEL cmd) {
  sm_constant_values *v = (sm_constant_values *)self;
  size_t size = data_type_size(type);
  if (!size)
    sm__fatal("-[MTLFunctionConstantValues %s]: type = %lu is not an MTLDataType softmetal "
              "supports for function constants (scalars and vectors of bool, char, short, int, "
              "half, float; long, ulong)",
              sel_getName(cmd), (unsigned long)type);
  if (!value) sm__fatal("-[MTLFunctionConstantValues %s]: value = NULL", sel_getName(cmd));
  fc_entry *e = realloc(v->e, (v->n + 1) * sizeof *e);
  if (!e) sm__fatal("-[MTLFunctionConstantValues %s]: out of memory", sel_getName(cmd));
  v->e = e;
  fc_entry *x = &v->e[v->n];
  memset(x, 0, sizeof *x);
  x->index = index;
  x->type = type;
  x->name = name ? strdup(name) : NULL;
  if (name && !x->name)
    sm__fatal("-[MTLFunctionConstantValues %s]: out of memory", sel_getName(cmd));
  memcpy(x->value, value, size);
  v->n++;
}
static void values_set_index(id self, SEL cmd, const void *value, NSUInteger type,
                             NSUInteger index) {
  values_add(self, value, type, index, NULL, cmd);
}
static void values_set_name(id self, SEL cmd, const void *value, NSUInteger type, id name) {
  const char *n = sm__string_utf8(name);
  if (!n) sm__fatal("-[MTLFunctionConstantValues %s]: name = nil", sel_getName(cmd));
  values_add(self, value, type, 0, n, cmd);
}
static void values_set_range(id self, SEL cmd, const void *values, NSUInteger type, NSRange r) {
  size_t size = data_type_size(type);
  if (r.length && r.location > (NSUInteger)-1 - (r.length - 1))
    sm__fatal("-[MTLFunctionConstantValues %s]: range {%lu, %lu} overflows", sel_getName(cmd),
              r.location, r.length);
  for (NSUInteger i = 0; i < r.length; i++)
    values_add(self, (const unsigned char *)values + i * size, type, r.location + i, NULL, cmd);
}
static void values_reset(id self, SEL cmd) {
  (void)cmd;
  sm_constant_values *v = (sm_constant_values *)self;
  values_destroy(&v->hdr);
  v->e = NULL;
  v->n = 0;
}

static id library_function_names(id self, SEL cmd) {
  (void)cmd;
  sm_library *l = (sm_library *)self;
  id *names = calloc(l->n ? l->n : 1, sizeof(id));
  if (!names) return nil;
  for (unsigned i = 0; i < l->n; i++) names[i] = sm__string(l->kernels[i].name);
  id arr = sm__array(names, l->n);
  for (unsigned i = 0; i < l->n; i++) sm__release(names[i]);
  free(names);
  return sm__autorelease(arr);
}

static id library_device(id self, SEL cmd) {
  (void)cmd;
  return ((sm_library *)self)->device;
}
static id function_device(id self, SEL cmd) {
  (void)cmd;
  return ((sm_function *)self)->library->device;
}
static id pipeline_device(id self, SEL cmd) {
  (void)cmd;
  return ((sm_function *)((sm_pipeline *)self)->function)->library->device;
}

static id function_name(id self, SEL cmd) {
  (void)cmd;
  return ((sm_function *)self)->name;
}

/* MTLFunctionConstant: one function constant a function uses. */
typedef struct {
  sm_obj hdr;
  id name;
  NSUInteger type, index;
  BOOL required;
} sm_fn_constant;
static void fn_constant_destroy(sm_obj *o) { sm__release(((sm_fn_constant *)o)->name); }
static sm_class fn_constant_class = {"MTLFunctionConstant", sizeof(sm_fn_constant),
                                     fn_constant_destroy, Nil, 0};
static id fn_constant_name(id self, SEL cmd) {
  (void)cmd;
  return ((sm_fn_constant *)self)->name;
}
static NSUInteger fn_constant_type(id self, SEL cmd) {
  (void)cmd;
  return ((sm_fn_constant *)self)->type;
}
static NSUInteger fn_constant_index(id self, SEL cmd) {
  (void)cmd;
  return ((sm_fn_constant *)self)->index;
}
static BOOL fn_constant_required(id self, SEL cmd) {
  (void)cmd;
  return ((sm_fn_constant *)self)->required;
}

/* functionConstantsDictionary: name -> MTLFunctionConstant for each function
 * constant the function uses (empty when none), autoreleased. A function
 * with any must be fetched with newFunctionWithName:constantValues:error:
 * to make a pipeline. */
static id function_constants(id self, SEL cmd) {
  sm_function *fn = (sm_function *)self;
  const struct sm_kernel_desc *k = fn->desc;
  id *keys = calloc(k->fc_used_count + 1, sizeof(id)),
     *vals = calloc(k->fc_used_count + 1, sizeof(id));
  if (!keys || !vals) sm__fatal("-[SMFunction %s]: out of memory", sel_getName(cmd));
  size_t n = 0;
  for (uint32_t u = 0; u < k->fc_used_count; u++) {
    const struct sm_constant_desc *cd = &fn->library->constants[k->fc_used[u]];
    if (cd->index == UINT32_MAX) continue; /* derived: not a function constant */
    sm_fn_constant *c = sm__new(&fn_constant_class);
    if (!c) sm__fatal("-[SMFunction %s]: out of memory", sel_getName(cmd));
    c->name = sm__string(cd->name);
    c->type = cd->type;
    c->index = cd->index;
    c->required = !cd->optional;
    keys[n] = sm__string(cd->name);
    vals[n++] = (id)c;
  }
  id d = sm__dictionary_new(keys, vals, n);
  for (size_t i = 0; i < n; i++) {
    sm__release(keys[i]);
    sm__release(vals[i]);
  }
  free(keys);
  free(vals);
  if (!d) sm__fatal("-[SMFunction %s]: out of memory", sel_getName(cmd));
  return sm__autorelease(d);
}

static id device_new_pipeline(id self, SEL cmd, id function, id *error) {
  if (!sm__is(function, &function_class)) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_INTERNAL,
                               "%s: function = %s is not a kernel function", sel_getName(cmd),
                               function ? object_getClassName(function) : "nil"));
    return nil;
  }
  sm_function *fn = (sm_function *)function;
  const struct sm_kernel_desc *k = fn->desc;
  if (k->fc_used_count && !fn->specialized) {
    /* As Metal: the function needs values for the constants it requires,
     * named here (name, index, MTLDataType). */
    char list[600] = "";
    size_t len = 0;
    for (uint32_t u = 0; u < k->fc_used_count && len < sizeof list - 1; u++) {
      const struct sm_constant_desc *cd = &fn->library->constants[k->fc_used[u]];
      if (cd->index == UINT32_MAX || cd->optional) continue;
      int w = snprintf(list + len, sizeof list - len, "%s'%s' (index %u, %s)", len ? ", " : "",
                       cd->name, cd->index, data_type_name(cd->type));
      if (w < 0) break;
      len += (size_t)w < sizeof list - len ? (size_t)w : sizeof list - len - 1;
    }
    char msg[900];
    snprintf(msg, sizeof msg,
             "%s: function '%s' was not specialized and uses function constants without "
             "values: %s; a function with function constants (functionConstantsDictionary) "
             "makes a pipeline only when fetched with newFunctionWithName:constantValues:error:",
             sel_getName(cmd), k->name, len ? list : "(only optional ones)");
    sm__api_misuse_abort("SMDevice", msg); /* the validation layer's assertion */
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE, "%s", msg));
    return nil;
  }
  /* A kernel that uses a feature the device lacks fails here, as Metal's
   * back end fails it for that GPU. */
  const char *missing = sm__feature_missing(k->features);
  if (missing) {
    id name =
        ((id(*)(id, SEL))(void (*)(void))sm__lookup(self, "name"))(self, sel_registerName("name"));
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: function '%s' uses %s, which device '%s' does not support",
                               sel_getName(cmd), k->name, missing, sm__string_utf8(name)));
    return nil;
  }
  /* Metal generates the function's code here */
  char *diag = NULL;
  unsigned index = (unsigned)(k - fn->library->kernels);
  const sm_fn_code *code = function_code(fn->library, index, &diag);
  if (!code) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: cannot generate the code of function '%s':\n%s",
                               sel_getName(cmd), k->name, diag ? diag : "?"));
    free(diag);
    return nil;
  }
  sm_pipeline *p = sm__new(&sm__pipeline_class);
  if (!p) return nil;
  p->function = sm__retain(function);
  p->logging = fn->library->logging;
  p->desc_copy = *code->desc;
  /* Parameters whose [[function_constant(c)]] is false are absent: nothing
   * needs to be bound to them. */
  for (uint32_t i = 0; fn->fc_values && i < k->fc_cond_count; i++) {
    const uint32_t *c = &k->fc_conds[3 * i];
    bool present = false;
    code->constant_value(fn->fc_values, fn->fc_defined, c[2], &present);
    if (present) continue;
    if (c[0] == 0) {
      p->desc_copy.buffer_mask &= ~(1u << c[1]);
      p->desc_copy.written_mask &= ~(1u << c[1]);
    } else {
      p->desc_copy.threadgroup_mask &= ~(1u << c[1]);
    }
  }
  p->desc = &p->desc_copy;
  p->fc_values = fn->fc_values;
  p->fc_defined = fn->fc_defined;
  p->max_threads = sm__persona()->max_threads;
  unsigned long long tg = code->tg_static_bytes(index);
  if (tg > sm__persona()->max_tg_memory) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: kernel '%s' declares %llu bytes of threadgroup variables, "
                               "more than the %lu bytes of threadgroup memory",
                               sel_getName(cmd), k->name, tg, sm__persona()->max_tg_memory));
    sm__release((id)p);
    return nil;
  }
  p->static_tg = (NSUInteger)tg;
  return (id)p;
}

const sm_code *sm__function_code(id function, char **diag) {
  if (!function || !sm__is(function, &function_class)) {
    *diag = strdup("not a softmetal function");
    return NULL;
  }
  sm_function *f = (sm_function *)function;
  const sm_fn_code *c = function_code(f->library, (unsigned)(f->desc - f->library->kernels), diag);
  return c ? &c->code : NULL;
}

const struct sm_argbuf_layout *sm__function_argbuf(id function, unsigned index, id *device,
                                                   char **diag) {
  *diag = NULL;
  if (!function || !sm__is(function, &function_class)) {
    *diag = strdup("not a softmetal function");
    return NULL;
  }
  sm_function *f = (sm_function *)function;
  unsigned k = (unsigned)(f->desc - f->library->kernels);
  *device = f->library->device;
  const sm_fn_code *c = function_code(f->library, k, diag);
  if (!c) return NULL;
  const struct sm_argbuf_layout *(*fn)(unsigned, unsigned);
  void *sym = dlsym(c->dl, "softmetal_argbuf");
  if (!sym) {
    *diag = strdup("the function's code has no softmetal_argbuf table");
    return NULL;
  }
  memcpy(&fn, &sym, sizeof sym);
  return fn(k, index);
}

bool sm__function_code_key(id function, unsigned char key[32]) {
  if (!function || !sm__is(function, &function_class)) return false;
  sm_function *f = (sm_function *)function;
  sm_digest d;
  sm__function_key(&f->library->cl, (unsigned)(f->desc - f->library->kernels), false, &d, NULL);
  memcpy(key, d.d, 32);
  return true;
}

SM_EXPORT int softmetal_check_source(const char *source, long math_mode,
                                     unsigned long language_version, char **diagnostics) {
  *diagnostics = NULL;
  unsigned metal_version = metal_version_of(language_version);
  if (!source || math_mode < MATH_MODE_SAFE || math_mode > MATH_MODE_FAST ||
      (language_version && !metal_version)) {
    *diagnostics = strdup("softmetal_check_source: bad argument (source, math mode or "
                          "language version)");
    return -1;
  }
  sm_compiled_library cl;
  bool internal = false;
  /* a syntax check: the functions' flavour changes no diagnostic */
  if (!sm__compile_library(source, (int)math_mode, math_mode != MATH_MODE_SAFE, metal_version, &cl,
                           diagnostics, &internal))
    return internal ? -1 : 1;
  sm__compiled_library_free(&cl);
  return 0;
}

SM_EXPORT int softmetal_pipeline_bindings(void *pipeline, unsigned *buffers, unsigned *written,
                                          unsigned *threadgroup) {
  id o = (id)pipeline;
  if (!o || !sm__is(o, &sm__pipeline_class)) return -1;
  const struct sm_kernel_desc *k = ((sm_pipeline *)o)->desc;
  *buffers = k->buffer_mask;
  *written = k->written_mask;
  *threadgroup = k->threadgroup_mask;
  return 0;
}

static NSUInteger pipeline_max_threads(id self, SEL cmd) {
  (void)cmd;
  return ((sm_pipeline *)self)->max_threads;
}
static NSUInteger pipeline_width(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return sm__persona()->simd_width;
}
static NSUInteger pipeline_static_tg(id self, SEL cmd) {
  (void)cmd;
  return ((sm_pipeline *)self)->static_tg;
}

const sm_method_def sm__options_msl_methods[] = {
    SM_METHOD("init", options_init, "@@:"),
    SM_METHOD("fastMathEnabled", options_fast_math, "C@:"),
    SM_METHOD("setFastMathEnabled:", options_set_fast_math, "v@:C"),
    SM_METHOD("languageVersion", options_language_version, "Q@:"),
    SM_METHOD("setLanguageVersion:", options_set_language_version, "v@:Q"),
    {NULL, NULL, NULL},
};
/* Not under SOFTMETAL_NO_MATH_MODE=1 (sm__options_math_methods). */
static const sm_method_def options_math_methods[] = {
    SM_METHOD("mathMode", options_math_mode, "q@:"),
    SM_METHOD("setMathMode:", options_set_math_mode, "v@:q"),
    SM_METHOD("mathFloatingPointFunctions", options_fp_functions, "q@:"),
    SM_METHOD("setMathFloatingPointFunctions:", options_set_fp_functions, "v@:q"),
    {NULL, NULL, NULL},
};
/* SOFTMETAL_NO_MATH_MODE=1: options as before macOS 15, fastMathEnabled only. */
const sm_method_def *sm__options_math_methods(void) {
  const char *old_os = getenv("SOFTMETAL_NO_MATH_MODE");
  g_no_math_mode = old_os && strcmp(old_os, "1") == 0;
  return g_no_math_mode ? NULL : options_math_methods;
}

const sm_method_def sm__library_msl_methods[] = {
    SM_METHOD("newFunctionWithName:", library_new_function, "@@:@"),
    SM_METHOD("functionNames", library_function_names, "@@:"),
    SM_METHOD("device", library_device, "@@:"),
    SM_METHOD("newFunctionWithName:constantValues:error:", library_new_function_constants,
              "@@:@@^@"),
    {NULL, NULL, NULL},
};

static const sm_method_def values_methods[] = {
    SM_METHOD("init", values_init, "@@:"),
    SM_METHOD("setConstantValue:type:atIndex:", values_set_index, "v@:^vQQ"),
    SM_METHOD("setConstantValue:type:withName:", values_set_name, "v@:^vQ@"),
    SM_METHOD("setConstantValues:type:withRange:", values_set_range, "v@:^vQ{_NSRange=QQ}"),
    SM_METHOD("reset", values_reset, "v@:"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__function_msl_methods[] = {
    SM_METHOD("name", function_name, "@@:"),
    SM_METHOD("device", function_device, "@@:"),
    SM_METHOD("functionConstantsDictionary", function_constants, "@@:"),
    {NULL, NULL, NULL},
};

static const sm_method_def fn_constant_methods[] = {
    SM_METHOD("name", fn_constant_name, "@@:"),
    SM_METHOD("type", fn_constant_type, "Q@:"),
    SM_METHOD("index", fn_constant_index, "Q@:"),
    SM_METHOD("required", fn_constant_required, "C@:"),
    {NULL, NULL, NULL},
};

static const sm_method_def pipeline_methods[] = {
    SM_METHOD("maxTotalThreadsPerThreadgroup", pipeline_max_threads, "Q@:"),
    SM_METHOD("threadExecutionWidth", pipeline_width, "Q@:"),
    /* metal-cpp MTLComputePipeline.hpp: NS::UInteger staticThreadgroupMemoryLength() const */
    SM_METHOD("staticThreadgroupMemoryLength", pipeline_static_tg, "Q@:"),
    SM_METHOD("device", pipeline_device, "@@:"),
    {NULL, NULL, NULL},
};

void sm__register_msl(void) {
  SM_CLASS_DEFINE(&values_class, Nil, values_methods);
  SM_CLASS_DEFINE(&fn_constant_class, Nil, fn_constant_methods);
  SM_CLASS_DEFINE(&sm__pipeline_class, Nil, pipeline_methods);
}

/* newLibraryWithSource:options:error: is sm_host.c's (its preprocessor
 * macros first), which compiles through sm__device_new_library. */
const sm_method_def sm__device_msl_methods[] = {
    SM_METHOD("newComputePipelineStateWithFunction:error:", device_new_pipeline, "@@:@^@"),
    {NULL, NULL, NULL},
};
sm_class *const sm__options_k = &options_class;
sm_class *const sm__library_k = &library_class;
sm_class *const sm__function_k = &function_class;
