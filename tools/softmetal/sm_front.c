/* SPDX-License-Identifier: MIT */
/* softmetal's MSL front end (see sm_front.h). Works on tokens of the
 * preprocessed source: only lines that line markers attribute to
 * program_source are parsed and rewritten; everything else (metal_stdlib,
 * the C++ headers) passes through untouched. Parameter types are never read
 * from text: trampolines take them from the kernel's function type. */
#define _GNU_SOURCE
#include "sm_front.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_abi.h"

/* ------------------------------------------------------------- text */
typedef sm_text buf;

void sm__text_put(buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (n > SIZE_MAX / 2 - b->n - 1) {
    b->oom = true;
    return;
  }
  if (b->n + n + 1 > b->cap) {
    size_t cap = (b->n + n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void put_s(buf *b, const char *s) { sm__text_put(b, s, strlen(s)); }

void sm__text_printf(buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  char *s = malloc((size_t)n + 1);
  if (!s) {
    b->oom = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sm__text_put(b, s, (size_t)n);
  free(s);
}

/* ------------------------------------------------------------- tokens */
enum { T_ID, T_NUM, T_STR, T_PUN };

typedef struct {
  size_t off; /* in the preprocessed text */
  uint32_t len;
  int line, col; /* in program_source */
  char kind;
  bool done;  /* covered by a structural rewrite */
  bool proto; /* in a function declaration without a body (names there are not calls) */
} tok;

typedef struct {
  size_t at, end; /* replaced range of the preprocessed text */
  char *text;
  size_t seq;
} edit;

/* A kernel parameter. */
enum { P_NONE, P_BUFFER, P_TG, P_BUILTIN };
typedef struct {
  int kind, index, builtin;
  bool dev, cons, tgs, indirect; /* address spaces seen; pointer or reference */
  int fc;                        /* conditioning constant position, or -1 */
  int line, col;
} param;

/* A function definition of program_source (kernels and helpers). */
typedef struct {
  char name[128];
  size_t body0, body1; /* token range of the body, braces included */
  size_t decl0;        /* first token of the definition */
  bool kernel, is_template;
  bool implicit; /* an operator, constructor or destructor: called without its name */
  char host[128];
  param *p;
  int np;
  bool pbad; /* parameters failed to parse */
  int line, col;
} fdef;

typedef struct {
  char name[128];
  char type[64];
  int index; /* -1 when derived */
  int pos;
  int mtl_type, size;
  bool optional;
  size_t init0, init1; /* derived: initialiser tokens */
  size_t decl0, decl1; /* the declaration's tokens */
} fconst;

/* A kernel to export: a function, or an instantiation of a template. */
typedef struct {
  char host[128];
  char callee[512];
  int def;  /* fdef index */
  param *p; /* parameters (owned when from an instantiation) */
  int np;
  bool own_p;
  size_t insert_at; /* byte offset after which the trampoline goes */
  char pre[1024];   /* declarations the trampoline needs first */
  int line, col;
  bool inst; /* an explicit instantiation, guarded from its start (SM_GUARD_OPEN) */
} kout;

typedef struct {
  const char *pp;
  size_t len;
  const char *src_path;
  tok *t;
  size_t nt, capt;
  edit *e;
  size_t ne, cape;
  fdef *f;
  size_t nf;
  fconst *c;
  size_t nc;
  kout *k;
  size_t nk;
  uint32_t tg_ids; /* threadgroup variable declarations, at tokens tg_at[] */
  size_t *tg_at, tg_cap;
  char cls[128]; /* the class whose body is being parsed */
  int in_class;  /* depth of class bodies being parsed */
  bool foreign;  /* code from a header the analysis does not see */
  buf err;
  int nerr;
  bool oom;
} fe;

static void error_at(fe *f, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void error_at(fe *f, int line, int col, const char *fmt, ...) {
  if (f->nerr >= 20) return;
  f->nerr++;
  sm__text_printf(&f->err, SM_PROGRAM_SOURCE ":%d:%d: error: ", line, col);
  va_list ap;
  va_start(ap, fmt);
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sm__text_put(&f->err, msg, strlen(msg));
  put_s(&f->err, "\n");
}

static void *grow(void *p, size_t *cap, size_t n, size_t size, bool *oom) {
  if (n < *cap) return p;
  size_t c = *cap ? *cap * 2 : 64;
  if (c > SIZE_MAX / size) {
    *oom = true;
    return NULL;
  }
  void *q = realloc(p, c * size);
  if (!q) {
    *oom = true;
    return NULL;
  }
  *cap = c;
  return q;
}

static void add_edit(fe *f, size_t at, size_t end, const char *text) {
  edit *e = grow(f->e, &f->cape, f->ne, sizeof *e, &f->oom);
  if (!e) return;
  f->e = e;
  char *s = strdup(text);
  if (!s) {
    f->oom = true;
    return;
  }
  f->e[f->ne] = (edit){at, end, s, f->ne};
  f->ne++;
}

/* Blanks token i (spaces keep columns). */
static void blank(fe *f, size_t i) {
  char sp[64];
  size_t n = f->t[i].len < sizeof sp - 1 ? f->t[i].len : sizeof sp - 1;
  memset(sp, ' ', n);
  sp[n] = 0;
  add_edit(f, f->t[i].off, f->t[i].off + f->t[i].len, sp);
  f->t[i].done = true;
}
static void replace_tok(fe *f, size_t i, const char *text) {
  add_edit(f, f->t[i].off, f->t[i].off + f->t[i].len, text);
  f->t[i].done = true;
}

static bool is(const fe *f, size_t i, const char *s) {
  if (i >= f->nt) return false;
  size_t n = strlen(s);
  return f->t[i].len == n && memcmp(f->pp + f->t[i].off, s, n) == 0;
}
static bool is_id(const fe *f, size_t i) { return i < f->nt && f->t[i].kind == T_ID; }
/* Whether tokens a and b have the same text. */
static bool same_token(const fe *f, size_t a, size_t b) {
  return f->t[a].len == f->t[b].len &&
         memcmp(f->pp + f->t[a].off, f->pp + f->t[b].off, f->t[a].len) == 0;
}
static void text_of(const fe *f, size_t i, char *out, size_t cap) {
  size_t n = f->t[i].len < cap - 1 ? f->t[i].len : cap - 1;
  memcpy(out, f->pp + f->t[i].off, n);
  out[n] = 0;
}
/* Text of tokens [a, b) joined by single spaces. */
static void span_text(const fe *f, size_t a, size_t b, buf *out) {
  for (size_t i = a; i < b; i++) {
    if (i > a) put_s(out, " ");
    sm__text_put(out, f->pp + f->t[i].off, f->t[i].len);
  }
}

static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

static const char *const PUNCT3[] = {"<<=", ">>=", "...", "->*", "<=>"};
static const char *const PUNCT2[] = {
    "::", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&",
    "||", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", ".*", "##"};

/* Tokenizes pp[a, b) (one line of program_source, line number line). */
static void tokenize_line(fe *f, size_t a, size_t b, int line, size_t line_start) {
  const char *s = f->pp;
  size_t i = a;
  while (i < b) {
    char c = s[i];
    if (isspace((unsigned char)c)) {
      i++;
      continue;
    }
    size_t start = i;
    char kind;
    if (isalpha((unsigned char)c) || c == '_') {
      while (i < b && ident_char(s[i])) i++;
      kind = T_ID;
      /* string prefixes: u8"", L'' ... */
      if (i < b && (s[i] == '"' || s[i] == '\'') && (i - start <= 2 && strchr("uUL8", s[start]))) {
        char q = s[i++];
        while (i < b && s[i] != q) i += (s[i] == '\\') ? 2 : 1;
        i++;
        kind = T_STR;
      }
    } else if (isdigit((unsigned char)c) ||
               (c == '.' && i + 1 < b && isdigit((unsigned char)s[i + 1]))) {
      while (i < b && (ident_char(s[i]) || s[i] == '.' || s[i] == '\'' ||
                       ((s[i] == '+' || s[i] == '-') && strchr("eEpP", s[i - 1]))))
        i++;
      kind = T_NUM;
    } else if (c == '"' || c == '\'') {
      i++;
      while (i < b && s[i] != c) i += (s[i] == '\\') ? 2 : 1;
      i++;
      kind = T_STR;
    } else {
      kind = T_PUN;
      size_t n = 1;
      for (size_t k = 0; k < sizeof PUNCT3 / sizeof *PUNCT3; k++)
        if (i + 3 <= b && memcmp(s + i, PUNCT3[k], 3) == 0) n = 3;
      if (n == 1)
        for (size_t k = 0; k < sizeof PUNCT2 / sizeof *PUNCT2; k++)
          if (i + 2 <= b && memcmp(s + i, PUNCT2[k], 2) == 0) n = 2;
      i += n;
    }
    if (i > b) i = b;
    tok *t = grow(f->t, &f->capt, f->nt, sizeof *t, &f->oom);
    if (!t) return;
    f->t = t;
    f->t[f->nt++] = (tok){
        start, (uint32_t)(i - start), line, (int)(start - line_start) + 1, kind, false, false};
  }
}

/* Whether a file named by a line marker holds no user code: a system header
 * (flag 3), softmetal's own headers (metal_stdlib and the headers that name
 * it, sm_abi.h, in the include-* directory), or the compiler's <built-in>. */
static bool known_header(const char *name, size_t n, const char *flags, size_t nflags) {
  if (n && name[0] == '<') return true;
  for (size_t i = 0; i < nflags; i++) /* flags: " 1 3" */
    if (flags[i] == '3' && (i == 0 || flags[i - 1] == ' ') &&
        (i + 1 == nflags || flags[i + 1] == ' '))
      return true;
  size_t b = n;
  while (b && name[b - 1] != '/') b--;
  if (b == 0 || !memmem(name, b, "/include-", 9)) return false;
  return (n - b >= 6 && memcmp(name + b, "metal_", 6) == 0) ||
         (n - b == 8 && memcmp(name + b, "sm_abi.h", 8) == 0) ||
         (n - b == 6 && b >= 6 && memcmp(name + b - 6, "/simd/simd.h", 12) == 0);
}

/* `pragma unroll (MIN(A, B))`, `pragma clang loop unroll_count(N)` (text
 * after the '#'): a loop hint whose argument has a name in it. */
static bool unroll_hint_with_name(const char *s, size_t n) {
  size_t i = 0;
  while (i < n && s[i] == ' ') i++;
  if (n - i < 6 || memcmp(s + i, "pragma", 6) != 0) return false;
  i += 6;
  while (i < n && s[i] == ' ') i++;
  size_t w = i;
  while (i < n && ident_char(s[i])) i++;
  bool loop = (i - w == 6 && memcmp(s + w, "unroll", 6) == 0) ||
              (i - w == 8 && memcmp(s + w, "nounroll", 8) == 0) ||
              (i - w == 5 && memcmp(s + w, "clang", 5) == 0 && memmem(s + i, n - i, "loop", 4));
  if (!loop) return false;
  const char *open = memchr(s + i, '(', n - i);
  if (!open) return false;
  static const char *const WORDS[] = {"full",
                                      "enable",
                                      "disable",
                                      "assume_safety",
                                      "unroll",
                                      "unroll_count",
                                      "vectorize",
                                      "vectorize_width",
                                      "interleave",
                                      "interleave_count",
                                      "distribute",
                                      "pipeline",
                                      "pipeline_initiation_interval",
                                      "scalable",
                                      "fixed"};
  for (const char *c = open, *end = s + n; c < end;) {
    if (!isalpha((unsigned char)*c) && *c != '_') {
      c++;
      continue;
    }
    const char *word = c;
    while (c < end && ident_char(*c)) c++;
    size_t len = (size_t)(c - word);
    bool known = false;
    for (size_t k = 0; k < sizeof WORDS / sizeof *WORDS; k++)
      known = known || (strlen(WORDS[k]) == len && memcmp(WORDS[k], word, len) == 0);
    if (!known) return true;
  }
  return false;
}

/* Reads the line markers; tokenizes program_source lines; renames the file in
 * its markers. */
static void scan_pp(fe *f) {
  const char *s = f->pp;
  bool in_prog = false, in_foreign = false;
  int line = 1;
  for (size_t i = 0; i < f->len;) {
    size_t eol = i;
    while (eol < f->len && s[eol] != '\n') eol++;
    size_t j = i;
    while (j < eol && (s[j] == ' ' || s[j] == '\t')) j++;
    if (j < eol && s[j] == '#') {
      size_t k = j + 1;
      while (k < eol && s[k] == ' ') k++;
      if (k + 4 < eol && memcmp(s + k, "line", 4) == 0) k += 4;
      while (k < eol && s[k] == ' ') k++;
      if (k < eol && isdigit((unsigned char)s[k])) {
        int n = atoi(s + k);
        while (k < eol && isdigit((unsigned char)s[k])) k++;
        while (k < eol && s[k] == ' ') k++;
        if (k < eol && s[k] == '"') {
          size_t q = k + 1;
          while (q < eol && s[q] != '"') q += s[q] == '\\' ? 2 : 1;
          size_t name_len = q - k - 1;
          in_prog =
              name_len == strlen(f->src_path) && memcmp(s + k + 1, f->src_path, name_len) == 0;
          if (in_prog) /* diagnostics of the compile name the user's source so */
            add_edit(f, k + 1, q, SM_PROGRAM_SOURCE);
          in_foreign = !in_prog && !known_header(s + k + 1, name_len, s + q + 1, eol - q - 1);
        }
        line = n;
        i = eol + 1;
        continue;
      }
      /* another directive (#pragma): passes through, but for loop hints
       * whose argument names a macro: clang -E leaves pragma arguments
       * unexpanded, and the second compile has no macros */
      if (in_prog && unroll_hint_with_name(s + k, eol - k)) add_edit(f, j, eol, "");
    } else if (in_prog) {
      tokenize_line(f, i, eol, line, i);
    } else if (in_foreign && j < eol) {
      f->foreign = true;
    }
    line++;
    i = eol + 1;
  }
}

/* ------------------------------------------------------------- matching */
/* Index of the token closing the bracket at i, or nt. */
static size_t match(const fe *f, size_t i) {
  int depth = 0;
  for (size_t k = i; k < f->nt; k++) {
    if (f->t[k].kind != T_PUN || f->t[k].len != 1) continue;
    char c = f->pp[f->t[k].off];
    if (c == '(' || c == '[' || c == '{')
      depth++;
    else if (c == ')' || c == ']' || c == '}') {
      if (--depth == 0) return k;
    }
  }
  return f->nt;
}

/* Index after the template argument list opening at i ('<'), or nt. */
static size_t match_angle(const fe *f, size_t i) {
  int depth = 0;
  for (size_t k = i; k < f->nt; k++) {
    if (is(f, k, "(") || is(f, k, "[") || is(f, k, "{")) {
      k = match(f, k);
      continue;
    }
    if (is(f, k, "<"))
      depth++;
    else if (is(f, k, ">"))
      depth--;
    else if (is(f, k, ">>"))
      depth -= 2;
    else if (is(f, k, ";"))
      return f->nt;
    if (depth <= 0) return k + 1;
  }
  return f->nt;
}

static bool attr_start(const fe *f, size_t i) {
  return is(f, i, "[") && is(f, i + 1, "[") && f->t[i + 1].off == f->t[i].off + 1;
}

/* ------------------------------------------------------------- attributes */
static const char *const STD_ATTRS[] = {
    "maybe_unused", "nodiscard",  "noreturn",           "likely", "unlikely",
    "fallthrough",  "deprecated", "carries_dependency", "clang",  "gnu"};

static const struct {
  const char *name;
  const char *expr; /* %s: the parameter type */
  bool vector;
} BUILTINS[] = {
    {"thread_position_in_grid", "t->tpig", true},
    {"threads_per_grid", "t->tpg", true},
    {"grid_size", "t->tpg", true},
    {"grid_origin", "::sm::zero3", true},
    {"thread_position_in_threadgroup", "t->tpitg", true},
    {"threadgroup_position_in_grid", "t->tgpig", true},
    {"threads_per_threadgroup", "t->tptg", true},
    {"dispatch_threads_per_threadgroup", "t->dtptg", true},
    {"threadgroups_per_grid", "t->tgpg", true},
    {"thread_index_in_threadgroup", "t->tiitg", false},
    {"thread_index_in_simdgroup", "t->lane", false},
    {"simdgroup_index_in_threadgroup", "t->simdgroup", false},
    {"thread_index_in_quadgroup", "(t->tiitg % 4u)", false},
    {"quadgroup_index_in_threadgroup", "(t->tiitg / 4u)", false},
    {"threads_per_simdgroup", "t->simd_width", false},
    {"thread_execution_width", "t->simd_width", false},
    {"simdgroups_per_threadgroup", "((t->tg_threads + t->simd_width - 1u) / t->simd_width)", false},
    {"dispatch_simdgroups_per_threadgroup",
     "((t->dtptg[0] * t->dtptg[1] * t->dtptg[2] + t->simd_width - 1u) / t->simd_width)", false},
    {"quadgroups_per_threadgroup", "((t->tg_threads + 3u) / 4u)", false},
};
enum { N_BUILTINS = sizeof BUILTINS / sizeof BUILTINS[0] };

static const char *const REFUSED_WORDS[] = {"texture1d",
                                            "texture1d_array",
                                            "texture2d",
                                            "texture2d_array",
                                            "texture2d_ms",
                                            "texture2d_ms_array",
                                            "texture3d",
                                            "texturecube",
                                            "texturecube_array",
                                            "texture_buffer",
                                            "depth2d",
                                            "depth2d_array",
                                            "depth2d_ms",
                                            "depth2d_ms_array",
                                            "depthcube",
                                            "depthcube_array",
                                            "sampler",
                                            "acceleration_structure",
                                            "intersector",
                                            "intersection_function_table",
                                            "visible_function_table",
                                            "imageblock",
                                            "threadgroup_imageblock",
                                            "ray_data",
                                            "object_data",
                                            "mesh_grid_properties"};
static const char *const STAGES[] = {"vertex",       "fragment", "mesh",       "object",
                                     "intersection", "visible",  "stitchable", "tile"};

static int find_const(const fe *f, const char *name) {
  for (size_t i = 0; i < f->nc; i++)
    if (strcmp(f->c[i].name, name) == 0) return (int)i;
  return -1;
}

/* One attribute item: name and, when present, its argument token range. */
typedef struct {
  size_t name, arg0, arg1; /* arg0 == arg1: no arguments */
} attr_item;

/* Items of the attribute [[...]] at i; returns the index after "]]". */
static size_t read_attr(const fe *f, size_t i, attr_item *items, int *n, int cap) {
  size_t close = match(f, i); /* outer ']' */
  *n = 0;
  if (close >= f->nt) return f->nt;
  size_t k = i + 2;
  while (k + 1 < close) {
    if (is(f, k, ",")) {
      k++;
      continue;
    }
    attr_item it = {k, 0, 0};
    k++;
    while (is(f, k, "::") && k + 1 < close) k += 2; /* clang::x */
    if (is(f, k, "(")) {
      size_t c = match(f, k);
      it.arg0 = k + 1;
      it.arg1 = c;
      k = c + 1;
    }
    if (*n < cap) items[(*n)++] = it;
    while (k + 1 < close && !is(f, k, ",")) k++;
  }
  return close + 1;
}

static bool std_attr(const fe *f, size_t name) {
  for (size_t i = 0; i < sizeof STD_ATTRS / sizeof *STD_ATTRS; i++)
    if (is(f, name, STD_ATTRS[i])) return true;
  return false;
}

/* Blanks a whole attribute [[...]] at i unless it is standard C++. */
static size_t strip_attr(fe *f, size_t i) {
  attr_item it[8];
  int n = 0;
  size_t end = read_attr(f, i, it, &n, 8);
  bool keep = n > 0;
  for (int k = 0; k < n; k++) keep = keep && std_attr(f, it[k].name);
  if (!keep)
    for (size_t k = i; k < end; k++)
      if (!f->t[k].done) blank(f, k);
  return end;
}

/* Integer constant expressions of attribute arguments, after macro
 * expansion (`FC_BASE + 2` arrives as `400 + 2`): literals, + - * / %,
 * unary minus, parentheses. */
typedef struct {
  const fe *f;
  size_t i, end;
  bool ok;
} expr;
static long ex_sum(expr *e);
static long ex_atom(expr *e) {
  if (e->i >= e->end) return e->ok = false, 0;
  if (is(e->f, e->i, "(")) {
    e->i++;
    long v = ex_sum(e);
    if (!is(e->f, e->i, ")")) e->ok = false;
    e->i++;
    return v;
  }
  if (is(e->f, e->i, "-")) return e->i++, -ex_atom(e);
  if (e->f->t[e->i].kind != T_NUM) return e->ok = false, 0;
  char s[32];
  text_of(e->f, e->i++, s, sizeof s);
  char *end;
  long v = (long)strtoul(s, &end, 0);
  while (*end == 'u' || *end == 'U' || *end == 'l' || *end == 'L') end++;
  if (*end || v > 1000000) e->ok = false;
  return v;
}
static long ex_prod(expr *e) {
  long v = ex_atom(e);
  while (e->ok && e->i < e->end &&
         (is(e->f, e->i, "*") || is(e->f, e->i, "/") || is(e->f, e->i, "%"))) {
    char op = e->f->pp[e->f->t[e->i++].off];
    long r = ex_atom(e);
    if (op != '*' && r == 0) return e->ok = false, 0;
    v = op == '*' ? v * r : op == '/' ? v / r : v % r;
  }
  return v;
}
static long ex_sum(expr *e) {
  long v = ex_prod(e);
  while (e->ok && e->i < e->end && (is(e->f, e->i, "+") || is(e->f, e->i, "-"))) {
    bool plus = is(e->f, e->i++, "+");
    long r = ex_prod(e);
    v = plus ? v + r : v - r;
  }
  return v;
}
static int parse_uint(const fe *f, size_t a, size_t b, int *out) {
  expr e = {f, a, b, a < b};
  long v = ex_sum(&e);
  if (!e.ok || e.i != b || v < 0 || v > 65535) return 0;
  *out = (int)v;
  return 1;
}

/* ------------------------------------------------------------- parameters */
/* Parses the parameter list whose '(' is at open. */
static bool parse_params(fe *f, size_t open, const char *fname, param **out, int *nout) {
  size_t close = match(f, open);
  param *ps = NULL;
  int np = 0;
  size_t a = open + 1;
  bool ok = true;
  if (close >= f->nt) return false;
  if (a == close || (a + 1 == close && is(f, a, "void"))) {
    *out = NULL;
    *nout = 0;
    return true;
  }
  for (size_t k = a; k <= close; k++) {
    if (is(f, k, "(") || is(f, k, "[")) {
      if (!attr_start(f, k)) {
        k = match(f, k);
        continue;
      }
    }
    if (is(f, k, "<") && k > a && is_id(f, k - 1)) {
      size_t m = match_angle(f, k);
      if (m <= close) {
        k = m - 1;
        continue;
      }
    }
    if (attr_start(f, k)) {
      k = match(f, k);
      continue;
    }
    if (!(is(f, k, ",") || k == close)) continue;
    param *q = realloc(ps, (size_t)(np + 1) * sizeof *q);
    if (!q) {
      f->oom = true;
      free(ps);
      return false;
    }
    ps = q;
    param *p = &ps[np];
    memset(p, 0, sizeof *p);
    p->fc = -1;
    p->index = -1;
    p->line = f->t[a].line;
    p->col = f->t[a].col;
    /* address spaces and indirection at the top level; attributes */
    int angle = 0;
    for (size_t j = a; j < k; j++) {
      if (attr_start(f, j)) {
        attr_item it[8];
        int n = 0;
        size_t end = read_attr(f, j, it, &n, 8);
        for (int m = 0; m < n; m++) {
          char name[64];
          text_of(f, it[m].name, name, sizeof name);
          int v = 0;
          size_t line = (size_t)f->t[it[m].name].line, col = (size_t)f->t[it[m].name].col;
          if (strcmp(name, "buffer") == 0 || strcmp(name, "threadgroup") == 0) {
            if (!parse_uint(f, it[m].arg0, it[m].arg1, &v)) {
              /* an index that is not an integer literal: a function constant or an
               * expression of them, which softmetal's bindings cannot follow */
              char arg[128] = "";
              if (it[m].arg1 > it[m].arg0) text_of(f, it[m].arg0, arg, sizeof arg);
              error_at(f, (int)line, (int)col,
                       "parameter %d of kernel %s: [[%s(%s)]]: softmetal takes binding indices "
                       "as integer literals (or macros of them) only, not function constants",
                       np, fname, name, arg);
              ok = false;
            } else if (v >= (int)SM_MAX_BINDINGS) {
              error_at(f, (int)line, (int)col,
                       "parameter %d of kernel %s: [[%s(n)]] index must be < %u", np, fname, name,
                       SM_MAX_BINDINGS);
              ok = false;
            }
            p->kind = name[0] == 'b' ? P_BUFFER : P_TG;
            p->index = v;
          } else if (strcmp(name, "function_constant") == 0) {
            char cn[128] = "";
            if (it[m].arg1 == it[m].arg0 + 1) text_of(f, it[m].arg0, cn, sizeof cn);
            p->fc = find_const(f, cn);
            if (p->fc < 0) {
              error_at(f, (int)line, (int)col,
                       "parameter %d of kernel %s: [[function_constant(%s)]] does not name a "
                       "function constant",
                       np, fname, cn);
              ok = false;
            }
          } else if (strcmp(name, "user") == 0 || std_attr(f, it[m].name)) {
          } else {
            int b = -1;
            for (int x = 0; x < N_BUILTINS; x++)
              if (strcmp(name, BUILTINS[x].name) == 0) b = x;
            if (b >= 0) {
              p->kind = P_BUILTIN;
              p->builtin = b;
            } else {
              error_at(f, (int)line, (int)col,
                       "parameter %d of kernel %s: attribute [[%s]] is not supported by "
                       "softmetal (compute kernels only: no textures, samplers, stage_in or "
                       "render attributes)",
                       np, fname, name);
              ok = false;
            }
          }
        }
        j = end - 1;
        continue;
      }
      if (is(f, j, "(") || is(f, j, "[")) {
        /* an array parameter decays to a pointer, as in C */
        if (is(f, j, "[") && angle <= 0) p->indirect = true;
        j = match(f, j);
        continue;
      }
      if (is(f, j, "<"))
        angle++;
      else if (is(f, j, ">"))
        angle--;
      else if (is(f, j, ">>"))
        angle -= 2;
      if (angle > 0) continue;
      if (is(f, j, "device"))
        p->dev = true;
      else if (is(f, j, "constant"))
        p->cons = true;
      else if (is(f, j, "threadgroup"))
        p->tgs = true;
      else if (is(f, j, "*") || is(f, j, "&") || is(f, j, "&&"))
        p->indirect = true;
    }
    np++;
    a = k + 1;
  }
  *out = ps;
  *nout = np;
  return ok;
}

/* Metal's rule (Metal Shading Language Specification, "Locating Buffer,
 * Texture, and Sampler Arguments"): where the index attribute is left out,
 * the compiler assigns the first available index of the argument's kind.
 * Indices given explicitly are taken first; the others follow in declaration
 * order, each the lowest index of its kind (buffer: device and constant
 * pointers and references; threadgroup: threadgroup pointers) not yet used.
 * (That section's text could not be retrieved with the search tool when this
 * was written: the wording above is the specification's as recalled, not
 * re-checked; test_msl_front.c pins the behaviour for mixed explicit and
 * implicit indices.) */
static bool assign_indices(fe *f, param *p, int np, const char *fname) {
  uint32_t used[2] = {0, 0};
  bool ok = true;
  for (int i = 0; i < np; i++) {
    if (p[i].kind != P_BUFFER && p[i].kind != P_TG) continue;
    int kind = p[i].kind == P_TG;
    if (used[kind] >> p[i].index & 1u) {
      error_at(f, p[i].line, p[i].col, "kernel %s: [[%s(%d)]] is used twice", fname,
               kind ? "threadgroup" : "buffer", p[i].index);
      ok = false;
    }
    used[kind] |= 1u << p[i].index;
  }
  for (int i = 0; i < np; i++) {
    if (p[i].kind != P_NONE) continue;
    if (!p[i].indirect || !(p[i].dev || p[i].cons || p[i].tgs)) {
      error_at(f, p[i].line, p[i].col,
               "parameter %d of kernel %s has no attribute and is not a pointer or reference "
               "in the device, constant or threadgroup address space",
               i, fname);
      ok = false;
      continue;
    }
    int kind = p[i].tgs ? 1 : 0;
    int n = 0;
    while (n < (int)SM_MAX_BINDINGS && (used[kind] >> n & 1u)) n++;
    if (n == (int)SM_MAX_BINDINGS) {
      error_at(f, p[i].line, p[i].col, "kernel %s: no free %s index for parameter %d", fname,
               kind ? "threadgroup" : "buffer", i);
      ok = false;
      continue;
    }
    p[i].kind = kind ? P_TG : P_BUFFER;
    p[i].index = n;
    used[kind] |= 1u << n;
  }
  for (int i = 0; i < np; i++) {
    if (p[i].kind == P_BUFFER && !p[i].indirect) {
      error_at(f, p[i].line, p[i].col,
               "parameter %d of kernel %s: [[buffer(%d)]] needs a pointer or reference", i, fname,
               p[i].index);
      ok = false;
    }
    if (p[i].kind == P_TG && !p[i].indirect) {
      error_at(f, p[i].line, p[i].col,
               "parameter %d of kernel %s: [[threadgroup(%d)]] needs a pointer", i, fname,
               p[i].index);
      ok = false;
    }
  }
  return ok;
}

/* ------------------------------------------------------------- function bodies */
/* Threadgroup variable declaration f->tg_ids is at token i. */
static void add_tg_decl(fe *f, size_t i) {
  size_t *p = grow(f->tg_at, &f->tg_cap, f->tg_ids, sizeof *p, &f->oom);
  if (!p) return;
  f->tg_at = p;
  f->tg_at[f->tg_ids++] = i;
}

/* Threadgroup variables: `threadgroup T a[N], b = x;` in a body becomes
 * references into the threadgroup's arena (one instance per threadgroup and
 * per template instantiation, as in Metal); pointers and references to
 * threadgroup memory stay ordinary locals. Forms:
 *   declarators `name`, `name[N]...`, each optionally with an initialiser
 *   `= expr`, `= {...}`, `{...}` or `(args)` (Metal accepts them: the first
 *   thread of the threadgroup to reach the declaration stores the value, the
 *   others find it stored; see README "Threadgroup variables");
 *   `alignas(X)` before or after `threadgroup`; const/volatile before it or
 *   in the type.
 * Anything else (a pointer declarator after an array one, a function
 * declarator, a bit-field...) fails the compile naming the line: never a
 * private variable per thread. */
static void tg_refuse(fe *f, size_t at, const char *why) {
  error_at(f, f->t[at].line, f->t[at].col,
           "threadgroup declaration not understood by softmetal (%s); declare it as "
           "`threadgroup T name[N];` or `threadgroup T name = value;`",
           why);
}

/* The token after a declarator's initialiser or dimensions starting at k
 * (stops at ',' or ';' at depth 0), or end. */
static size_t tg_skip_expr(const fe *f, size_t k, size_t end) {
  while (k < end && !is(f, k, ",") && !is(f, k, ";")) {
    if (is(f, k, "(") || is(f, k, "[") || is(f, k, "{"))
      k = match(f, k);
    else if (is(f, k, "<") && k > 0 && is_id(f, k - 1)) {
      /* a template argument list only when it closes before the end */
      size_t m = match_angle(f, k);
      if (m <= end) k = m - 1;
    }
    k++;
  }
  return k;
}

static void rewrite_tg_decl(fe *f, size_t i, size_t body_end) {
  /* `void m() threadgroup {` (a qualified member function of a local class):
   * the word is a qualifier */
  if (is(f, i - 1, ")")) {
    size_t o = i - 1;
    int d = 0;
    while (o > 0) {
      if (is(f, o, ")"))
        d++;
      else if (is(f, o, "(") && --d == 0)
        break;
      o--;
    }
    if (!(o > 0 && is(f, o - 1, "alignas"))) {
      blank(f, i);
      return;
    }
  }
  if (is(f, i - 1, "typedef") || is(f, i - 1, "=")) { /* a type, not a variable */
    blank(f, i);
    return;
  }
  /* the statement's end */
  size_t end = i + 1;
  while (end < body_end && !is(f, end, ";") && !is(f, end, "}")) {
    if (is(f, end, "(") || is(f, end, "[") || is(f, end, "{")) end = match(f, end);
    if (end >= body_end) break;
    end++;
  }
  /* the type: up to the first declarator's name */
  size_t j = i + 1, name = 0;
  bool indirect = false;
  buf align = {0};
  size_t type0 = i + 1;
  while (j <= end) {
    if (is(f, j, "alignas") && is(f, j + 1, "(")) {
      size_t c = match(f, j + 1);
      if (c >= end) break;
      span_text(f, j + 2, c, &align);
      if (j == type0)
        type0 = c + 1;
      else {
        tg_refuse(f, j, "alignas inside the type");
        free(align.p);
        return;
      }
      j = c + 1;
      continue;
    }
    if ((is(f, j, "decltype") || is(f, j, "__typeof__") || is(f, j, "typeof")) &&
        is(f, j + 1, "(")) {
      j = match(f, j + 1) + 1;
      continue;
    }
    if (is(f, j, "<") && j > 0 && is_id(f, j - 1)) {
      size_t m = match_angle(f, j);
      if (m > end) break;
      j = m;
      continue;
    }
    if (is(f, j, "*") || is(f, j, "&") || is(f, j, "&&")) indirect = true;
    if (is(f, j, "(") && (is(f, j + 1, "*") || is(f, j + 1, "&"))) indirect = true;
    if (is(f, j, "[") || is(f, j, ",") || is(f, j, "=") || is(f, j, "{") || is(f, j, "(") ||
        is(f, j, ";") || is(f, j, ":"))
      break;
    j++;
  }
  if (indirect) {
    blank(f, i);
    free(align.p);
    return;
  }
  if (end >= body_end || !is(f, end, ";")) {
    tg_refuse(f, i, "no ';' ends it");
    free(align.p);
    return;
  }
  if (j > end || is(f, j, ":") || j < 2 || !is_id(f, j - 1) || j - 1 <= type0) {
    tg_refuse(f, j < end ? j : i, "no type and name found");
    free(align.p);
    return;
  }
  name = j - 1;
  /* alignas before the word threadgroup: `alignas(16) threadgroup float a[4];` */
  size_t stmt0 = i;
  if (is(f, i - 1, ")")) {
    size_t o = i - 1;
    int d = 0;
    while (o > 0) {
      if (is(f, o, ")"))
        d++;
      else if (is(f, o, "(") && --d == 0)
        break;
      o--;
    }
    if (align.n == 0) span_text(f, o + 1, i - 1, &align);
    stmt0 = o - 1;
  }
  buf type = {0}, out = {0};
  span_text(f, type0, name, &type);
  size_t k = name;
  bool ok = true;
  while (ok && k < end) {
    if (!is_id(f, k)) {
      tg_refuse(f, k, "a declarator that is not a plain name");
      ok = false;
      break;
    }
    size_t d0 = k + 1, d1 = d0;
    while (d1 < end && is(f, d1, "[") && !attr_start(f, d1)) d1 = match(f, d1) + 1;
    size_t a1 = d1;
    while (a1 < end && attr_start(f, a1)) a1 = match(f, a1) + 1; /* [[attributes]]: dropped */
    size_t i0 = a1, i1 = a1;
    if (is(f, i0, "=") || is(f, i0, "{") || is(f, i0, "(")) i1 = tg_skip_expr(f, i0, end);
    if (i1 < end && !is(f, i1, ",")) {
      tg_refuse(f, i1, "unexpected tokens after a declarator");
      ok = false;
      break;
    }
    buf dims = {0}, init = {0};
    span_text(f, d0, d1, &dims);
    span_text(f, i0, i1, &init);
    char ty[64];
    /* a local struct carries alignas */
    if (align.n)
      sm__text_printf(&out, "struct alignas(%s) sm_tga_%u { %s v %s; }; ", align.p, f->tg_ids,
                      type.p ? type.p : "", dims.p ? dims.p : "");
    if (align.n) snprintf(ty, sizeof ty, "sm_tga_%u", f->tg_ids);
    const char *tyname = align.n ? ty : NULL;
    sm__text_printf(&out, "auto &%.*s = ", (int)f->t[k].len, f->pp + f->t[k].off);
    if (i1 == i0)
      sm__text_printf(&out, "::sm::tg_var<%s%s%s, %uu>()", tyname ? tyname : type.p,
                      tyname ? "" : " ", tyname ? "" : (dims.p ? dims.p : ""), f->tg_ids);
    else
      sm__text_printf(&out,
                      "::sm::tg_var_init<%s%s%s, %uu>([&](void *sm_tg_p) { %s sm_tg_i %s %s; "
                      "__builtin_memcpy(sm_tg_p, (const void *)&sm_tg_i, sizeof sm_tg_i); })",
                      tyname ? tyname : type.p, tyname ? "" : " ",
                      tyname ? "" : (dims.p ? dims.p : ""), f->tg_ids, type.p ? type.p : "",
                      dims.p ? dims.p : "", init.p);
    put_s(&out, tyname ? ".v; " : "; ");
    add_tg_decl(f, i);
    if (dims.oom || init.oom) f->oom = true;
    free(dims.p);
    free(init.p);
    k = i1 + 1;
  }
  if (ok) {
    /* keep the lines: as many newlines as the declaration spanned */
    for (size_t o = f->t[stmt0].off; o < f->t[end].off; o++)
      if (f->pp[o] == '\n') put_s(&out, "\n");
    if (type.oom || out.oom) f->oom = true;
    add_edit(f, f->t[stmt0].off, f->t[end].off + 1, out.p ? out.p : "");
    for (size_t x = stmt0; x <= end; x++) f->t[x].done = true;
  }
  free(type.p);
  free(out.p);
  free(align.p);
}

static void scan_body(fe *f, size_t b0, size_t b1) {
  for (size_t i = b0 + 1; i < b1; i++) {
    if (!is(f, i, "threadgroup") || f->t[i].done) continue;
    size_t q = i - 1; /* `(const threadgroup T *)`: a type, not a declaration */
    while (q > b0 && (is(f, q, "const") || is(f, q, "volatile"))) q--;
    if (is(f, q, "(") || is(f, q, ",") || is(f, q, "<")) continue;
    rewrite_tg_decl(f, i, b1);
  }
}

/* ------------------------------------------------------------- declarations */
static size_t parse_scope(fe *f, size_t i);
static bool addr_space(const fe *f, size_t i) {
  return is(f, i, "device") || is(f, i, "constant") || is(f, i, "thread") ||
         is(f, i, "threadgroup");
}

static fdef *new_fdef(fe *f) {
  fdef *d = realloc(f->f, (f->nf + 1) * sizeof *d);
  if (!d) {
    f->oom = true;
    return NULL;
  }
  f->f = d;
  memset(&f->f[f->nf], 0, sizeof *f->f);
  return &f->f[f->nf++];
}

static kout *new_kout(fe *f) {
  kout *k = realloc(f->k, (f->nk + 1) * sizeof *k);
  if (!k) {
    f->oom = true;
    return NULL;
  }
  f->k = k;
  memset(&f->k[f->nk], 0, sizeof *f->k);
  return &f->k[f->nk++];
}

static int mtl_type(const char *t, int *size) {
  static const struct {
    const char *name;
    int base, esize;
  } T[] = {{"float", 3, 4},   {"half", 16, 2}, {"int", 29, 4},   {"uint", 33, 4}, {"short", 37, 2},
           {"ushort", 41, 2}, {"char", 45, 1}, {"uchar", 49, 1}, {"bool", 53, 1}};
  if (strncmp(t, "metal::", 7) == 0) t += 7;
  static const char *const FIXED[][2] = {
      {"int8_t", "char"}, {"uint8_t", "uchar"}, {"int16_t", "short"}, {"uint16_t", "ushort"},
      {"int32_t", "int"}, {"uint32_t", "uint"}, {"int64_t", "long"},  {"uint64_t", "ulong"}};
  for (size_t i = 0; i < sizeof FIXED / sizeof *FIXED; i++) /* MSL's fixed-width typedefs */
    if (strcmp(t, FIXED[i][0]) == 0) t = FIXED[i][1];
  static const char *const C_SPELT[][2] = {
      {"unsigned int", "uint"},   {"unsigned", "uint"},      {"unsigned short", "ushort"},
      {"unsigned char", "uchar"}, {"signed char", "char"},   {"signed int", "int"},
      {"signed", "int"},          {"unsigned long", "ulong"}};
  for (size_t i = 0; i < sizeof C_SPELT / sizeof *C_SPELT; i++) /* C's spellings of them */
    if (strcmp(t, C_SPELT[i][0]) == 0) t = C_SPELT[i][1];
  if (strcmp(t, "long") == 0) return *size = 8, 81;
  if (strcmp(t, "ulong") == 0) return *size = 8, 85;
  for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
    size_t n = strlen(T[i].name);
    if (strncmp(t, T[i].name, n) != 0) continue;
    if (!t[n]) return *size = T[i].esize, T[i].base;
    if (t[n] >= '2' && t[n] <= '4' && !t[n + 1]) {
      int w = t[n] - '0';
      *size = T[i].esize * (w == 3 ? 4 : w);
      return T[i].base + w - 1;
    }
  }
  return -1;
}

static fconst *new_const(fe *f, size_t name_tok) {
  fconst *c = realloc(f->c, (f->nc + 1) * sizeof *c);
  if (!c) {
    f->oom = true;
    return NULL;
  }
  f->c = c;
  fconst *k = &f->c[f->nc];
  memset(k, 0, sizeof *k);
  text_of(f, name_tok, k->name, sizeof k->name);
  k->pos = (int)f->nc++;
  return k;
}

/* `constant T name [[function_constant(i)]];` at i0..semi (attribute at attr). */
static void declare_constant(fe *f, size_t i0, size_t semi, size_t attr, int index) {
  size_t cons = i0;
  while (cons < semi && !is(f, cons, "constant")) cons++;
  size_t name = attr - 1;
  if (cons >= semi || name <= cons + 1 || !is_id(f, name)) {
    error_at(f, f->t[i0].line, f->t[i0].col,
             "a function constant is declared as 'constant T name [[function_constant(i)]];'");
    return;
  }
  /* `static constant constexpr const bool NAME [[function_constant(0)]]`: the
   * qualifiers in any order; what remains is the type */
  buf type = {0};
  for (size_t q = i0; q < name; q++) {
    if (q == cons) continue;
    if (is(f, q, "static") || is(f, q, "constexpr") || is(f, q, "const") || is(f, q, "constant") ||
        is(f, q, "inline")) {
      blank(f, q);
      continue;
    }
    if (q < cons) continue;
    if (type.n) put_s(&type, " ");
    sm__text_put(&type, f->pp + f->t[q].off, f->t[q].len);
  }
  char t[64];
  snprintf(t, sizeof t, "%s", type.p ? type.p : "");
  free(type.p);
  char *sp;
  while ((sp = strstr(t, " :: ")) != NULL)
    memmove(sp + 2, sp + 4, strlen(sp + 4) + 1), sp[0] = ':', sp[1] = ':';
  int size = 0, mt = mtl_type(t, &size);
  if (mt < 0) {
    error_at(f, f->t[cons + 1].line, f->t[cons + 1].col,
             "function constant type '%s' is not supported by softmetal (scalars and vectors "
             "of bool, char, short, int, half, float; long, ulong)",
             t);
    return;
  }
  fconst *c = new_const(f, name);
  if (!c) return;
  c->decl0 = i0;
  c->decl1 = semi;
  snprintf(c->type, sizeof c->type, "%s", t);
  c->index = index;
  c->mtl_type = mt;
  c->size = size;
  replace_tok(f, cons, "static thread_local");
  char tail[1024];
  snprintf(tail, sizeof tail,
           "; static thread_local bool sm_fcdef_%s; static ::sm::fc_reg sm_fcreg_%d("
           "[](const unsigned char *v, const unsigned char *d) { std::memcpy((void *)&%s, v + "
           "%d * %u, sizeof %s); sm_fcdef_%s = d[%d] != 0; }, [](void *o) { "
           "std::memcpy(o, (const void *)&%s, sizeof %s); });",
           c->name, c->pos, c->name, c->pos, SM_FC_SLOT, c->name, c->name, c->pos, c->name,
           c->name);
  replace_tok(f, semi, tail);
}

/* `constant T name = init;` whose init reads function constants. */
static bool derived_constant(fe *f, size_t i0, size_t semi) {
  size_t eq = i0;
  while (eq < semi && !is(f, eq, "=")) eq++;
  if (eq >= semi || !is_id(f, eq - 1)) return false;
  bool reads = false;
  for (size_t k = eq + 1; k < semi; k++) {
    char w[128];
    if (!is_id(f, k)) continue;
    text_of(f, k, w, sizeof w);
    if (find_const(f, w) >= 0 || strcmp(w, "is_function_constant_defined") == 0) reads = true;
  }
  size_t cons = i0;
  while (cons < eq && !is(f, cons, "constant")) cons++;
  if (!reads || cons >= eq) return false;
  fconst *c = new_const(f, eq - 1);
  if (!c) return true;
  c->decl0 = i0;
  c->decl1 = semi;
  c->index = -1;
  c->init0 = eq + 1;
  c->init1 = semi;
  buf type = {0};
  span_text(f, cons + 1, eq - 1, &type);
  snprintf(c->type, sizeof c->type, "%s", type.p ? type.p : "");
  free(type.p);
  c->size = 0;
  replace_tok(f, cons, "static thread_local");
  char head[512], tail[512];
  snprintf(head, sizeof head,
           "; static ::sm::fc_reg sm_fcreg_%d([](const unsigned char *, const unsigned char *) "
           "{ %s = (",
           c->pos, c->name);
  snprintf(tail, sizeof tail,
           "); }, [](void *o) { std::memcpy(o, (const void *)&%s, sizeof %s); });", c->name,
           c->name);
  replace_tok(f, eq, head);
  replace_tok(f, semi, tail);
  return true;
}

/* The function name before the parameter list at open: identifier, or
 * name<...>. Returns the token index of the name, or nt. */
static size_t name_before(const fe *f, size_t open, size_t start) {
  if (open == start) return f->nt;
  size_t k = open - 1;
  if (is(f, k, ">") || is(f, k, ">>")) {
    int depth = 0;
    for (size_t j = k + 1; j-- > start;) {
      if (is(f, j, ">"))
        depth++;
      else if (is(f, j, ">>"))
        depth += 2;
      else if (is(f, j, "<")) {
        if (--depth == 0) return j > start && is_id(f, j - 1) ? j - 1 : f->nt;
      }
    }
    return f->nt;
  }
  return is_id(f, k) ? k : f->nt;
}

/* Tokens [a, b) as the compiler will see them: attributes, `kernel` and
 * address spaces dropped (constant: const). */
static void plain_text(const fe *f, size_t a, size_t b, buf *out) {
  for (size_t q = a; q < b; q++) {
    if (attr_start(f, q)) {
      q = match(f, q);
      continue;
    }
    if (is(f, q, "kernel") || is(f, q, "device") || is(f, q, "thread") || is(f, q, "threadgroup"))
      continue;
    put_s(out, " ");
    if (is(f, q, "constant"))
      put_s(out, "const");
    else
      sm__text_put(out, f->pp + f->t[q].off, f->t[q].len);
  }
}

static const char *const NOT_NAMES[] = {"decltype",      "sizeof",   "alignas",      "alignof",
                                        "__attribute__", "noexcept", "static_assert"};

static void parse_decl(fe *f, size_t *pi) {
  size_t i = *pi, start = i;
  bool tmpl = false, inst = false, kernel = false;
  char host[128] = "";
  int fc_index = -1;
  size_t fc_attr = 0;
  if (is(f, i, "template")) {
    if (is(f, i + 1, "<")) {
      tmpl = true;
      i = match_angle(f, i + 1);
    } else {
      inst = true;
      i++;
    }
  }
  if (is(f, i, "namespace") || (is(f, i, "inline") && is(f, i + 1, "namespace"))) {
    while (i < f->nt && !is(f, i, "{") && !is(f, i, ";")) i++;
    if (is(f, i, "{")) {
      i = parse_scope(f, i + 1);
      if (i < f->nt) i++; /* '}' */
    } else if (i < f->nt) {
      i++;
    }
    *pi = i;
    return;
  }
  if (is(f, i, "extern") && i + 2 < f->nt && f->t[i + 1].kind == T_STR && is(f, i + 2, "{")) {
    i = parse_scope(f, i + 3);
    *pi = i < f->nt ? i + 1 : i;
    return;
  }
  size_t open = f->nt, body0 = f->nt, body1 = f->nt, end = f->nt;
  bool assign = false, saw_operator = false;
  for (size_t k = i; k < f->nt; k++) {
    if (attr_start(f, k)) {
      attr_item it[8];
      int n = 0;
      size_t e = read_attr(f, k, it, &n, 8);
      for (int m = 0; m < n; m++) {
        char name[64];
        text_of(f, it[m].name, name, sizeof name);
        if (open < f->nt) continue; /* a parameter's or the body's */
        if (strcmp(name, "kernel") == 0)
          kernel = true;
        else if (strcmp(name, "host_name") == 0) {
          /* one string, or adjacent ones ("reduce_" #name) */
          host[0] = 0;
          bool ok = it[m].arg1 > it[m].arg0;
          for (size_t q = it[m].arg0; ok && q < it[m].arg1; q++) {
            const tok *s = &f->t[q];
            ok = s->kind == T_STR && s->len >= 2 && f->pp[s->off] == '"';
            if (ok && strlen(host) + s->len < sizeof host)
              strncat(host, f->pp + s->off + 1, s->len - 2);
          }
          if (!ok) {
            error_at(f, f->t[it[m].name].line, f->t[it[m].name].col,
                     "[[host_name(...)]] needs a string literal");
            host[0] = 0;
          }
        } else if (strcmp(name, "function_constant") == 0) {
          if (!parse_uint(f, it[m].arg0, it[m].arg1, &fc_index)) {
            error_at(f, f->t[it[m].name].line, f->t[it[m].name].col,
                     "[[function_constant(i)]] needs an index from 0 to 65535");
            fc_index = -1;
          }
          fc_attr = k;
        } else {
          for (size_t s = 0; s < sizeof STAGES / sizeof *STAGES; s++)
            if (strcmp(name, STAGES[s]) == 0)
              error_at(f, f->t[it[m].name].line, f->t[it[m].name].col,
                       "[[%s]] functions are not supported by softmetal (compute kernels only)",
                       name);
        }
      }
      k = e - 1;
      continue;
    }
    if (is(f, k, ";")) {
      end = k;
      break;
    }
    if (is(f, k, "=") && !is(f, k - 1, "operator")) assign = true; /* not `operator=` */
    if (open == f->nt && !assign && is(f, k, "kernel")) {
      kernel = true;
      continue;
    }
    if (open == f->nt && !assign) {
      for (size_t s = 0; s < sizeof STAGES / sizeof *STAGES; s++)
        if (is(f, k, STAGES[s]) && k + 1 < f->nt && f->t[k + 1].kind == T_ID)
          error_at(f, f->t[k].line, f->t[k].col,
                   "%s functions are not supported by softmetal (compute kernels only)", STAGES[s]);
    }
    if (is(f, k, "operator")) saw_operator = true;
    if (is(f, k, "(") && is(f, k - 1, "operator")) { /* operator() */
      k = match(f, k);
      continue;
    }
    if (is(f, k, "(")) {
      size_t nm = name_before(f, k, i);
      bool fn = open == f->nt && !assign && (nm < f->nt || saw_operator);
      if (nm >= f->nt) nm = k - 1;
      for (size_t s = 0; fn && s < sizeof NOT_NAMES / sizeof *NOT_NAMES; s++)
        if (is(f, nm, NOT_NAMES[s])) fn = false;
      if (fn) open = k;
      k = match(f, k);
      continue;
    }
    if (is(f, k, "[")) {
      k = match(f, k);
      continue;
    }
    if (is(f, k, "{")) {
      size_t c = match(f, k);
      if (open < f->nt && !assign) {
        body0 = k;
        body1 = c;
        end = c;
        break;
      }
      size_t key = i;
      while (key < k && !is(f, key, "struct") && !is(f, key, "class") && !is(f, key, "union"))
        key++;
      if (key < k && !assign) { /* a class: its members are declarations too */
        char outer[sizeof f->cls];
        memcpy(outer, f->cls, sizeof outer);
        f->cls[0] = 0;
        if (is_id(f, key + 1)) text_of(f, key + 1, f->cls, sizeof f->cls);
        f->in_class++;
        parse_scope(f, k + 1);
        f->in_class--;
        memcpy(f->cls, outer, sizeof outer);
      } else {
        scan_body(f, k, c);
      }
      k = c;
      continue;
    }
    if (is(f, k, "}")) { /* end of the enclosing scope: stop here */
      end = k - 1;
      break;
    }
  }
  if (end >= f->nt) end = f->nt - 1;
  *pi = end + 1;
  if (fc_index >= 0 && body0 == f->nt) {
    declare_constant(f, start, end, fc_attr, fc_index);
    return;
  }
  if (body0 == f->nt && open == f->nt && !inst && !f->in_class) {
    /* `threadgroup float buf[64];` at program scope: Metal refuses it (only
     * constant variables there); as a CPU global it would be one array for
     * every threadgroup */
    size_t w = start;
    while (w < end && (is(f, w, "static") || is(f, w, "const") || is(f, w, "volatile"))) w++;
    if (is(f, w, "threadgroup") || is(f, w, "device") || is(f, w, "thread")) {
      error_at(f, f->t[w].line, f->t[w].col,
               "a variable at program scope must be in the constant address space (a "
               "threadgroup variable is declared inside a kernel or function)");
      return;
    }
  }
  if (body0 == f->nt && open == f->nt && !inst) {
    size_t k = start;
    while (k < end && !is(f, k, "constant")) k++;
    if (k < end) derived_constant(f, start, end);
    return;
  }
  if (inst) {
    for (size_t k = start; k <= end; k++) f->t[k].proto = true;
    if (!kernel) return;
    /* template [[host_name("n")]] [[kernel]] decltype(f<T>) f<T>;  or
     * template [[host_name("n")]] [[kernel]] void f<T>(params); */
    size_t e0, e1;
    if (open < f->nt) {
      e0 = name_before(f, open, i);
      e1 = open;
    } else { /* the name before ';': f<T>, ns::f<T> */
      e1 = end;
      e0 = end - 1;
      if (is(f, e0, ">") || is(f, e0, ">>")) {
        int depth = 0;
        for (size_t j = e0 + 1; j-- > i;) {
          if (is(f, j, ">"))
            depth++;
          else if (is(f, j, ">>"))
            depth += 2;
          else if (is(f, j, "<") && --depth == 0) {
            e0 = j - 1;
            break;
          }
        }
      }
      if (!is_id(f, e0)) e0 = e1;
    }
    if (e0 >= e1 || e0 >= f->nt) {
      error_at(f, f->t[start].line, f->t[start].col, "cannot read the kernel instantiated here");
      return;
    }
    /* `kernel void ::ns::f<T>(...)`: the qualifier's names, not the return type */
    while (e0 > i && is(f, e0 - 1, "::"))
      e0 -= is_id(f, e0 - 2) && !is(f, e0 - 2, "void") && !is(f, e0 - 2, "kernel") ? 2 : 1;
    size_t base = e0;
    while (base + 1 < e1 && (is(f, base + 1, "::") || is_id(f, base + 1) || is(f, base, "::")) &&
           !is(f, base + 1, "<"))
      base++;
    char fname[128];
    text_of(f, base, fname, sizeof fname);
    int def = -1;
    for (size_t d = 0; d < f->nf; d++)
      if (f->f[d].is_template && strcmp(f->f[d].name, fname) == 0) def = (int)d;
    if (def < 0) {
      error_at(f, f->t[base].line, f->t[base].col,
               "kernel instantiation of '%s': no kernel template of that name before it", fname);
      return;
    }
    kout *k = new_kout(f);
    if (!k) return;
    buf callee = {0};
    span_text(f, e0, e1, &callee);
    snprintf(k->callee, sizeof k->callee, "%s", callee.p ? callee.p : "");
    bool deduced = open < f->nt && !strchr(k->callee, '<');
    if (deduced) {
      /* `template [[host_name("x")]] kernel void k(device float *, uint);`: the
       * template arguments are deduced from the parameter types, as C++ does
       * for a pointer to the function of that type */
      buf pre = {0};
      sm__text_printf(&pre, " static ");
      plain_text(f, i, e0, &pre);
      sm__text_printf(&pre, " (*const sm_inst_%zu)(", f->nk - 1);
      plain_text(f, open + 1, match(f, open), &pre);
      sm__text_printf(&pre, ") = &%s;", k->callee);
      snprintf(k->pre, sizeof k->pre, "%s", pre.p ? pre.p : "");
      if (pre.oom || pre.n >= sizeof k->pre) f->oom = true;
      free(pre.p);
      snprintf(k->callee, sizeof k->callee, "(*sm_inst_%zu)", f->nk - 1);
    }
    free(callee.p);
    snprintf(k->host, sizeof k->host, "%s", host[0] ? host : fname);
    k->def = def;
    k->line = f->t[start].line;
    k->col = f->t[start].col;
    k->insert_at = f->t[end].off + f->t[end].len;
    /* The parameters' attributes belong to the template's definition; an
     * instantiation that spells the parameter types only names which one. */
    if (f->f[def].pbad) {
      f->nk--;
    } else {
      k->p = f->f[def].p;
      k->np = f->f[def].np;
      /* the instantiation and its trampoline are one guarded span */
      char g[40];
      snprintf(g, sizeof g, SM_GUARD_OPEN "%zu*/", f->nk - 1);
      add_edit(f, f->t[start].off, f->t[start].off, g);
      k->inst = true;
    }
    return;
  }
  if (body0 == f->nt) { /* a declaration */
    if (open < f->nt) {
      for (size_t k = start; k <= end; k++) f->t[k].proto = true;
      /* `T() constant = default;`: the address space of `this` */
      for (size_t k = match(f, open) + 1; k < end; k++) {
        if (addr_space(f, k))
          blank(f, k);
        else if (!is(f, k, "const") && !is(f, k, "volatile") && !is(f, k, "&") && !is(f, k, "&&") &&
                 !is(f, k, "noexcept"))
          break; /* `typedef void (f_t)(constant T &)`: no qualifiers of this */
      }
    }
    return;
  }
  /* `S() thread`, `operator float() const device`: the address space of
   * `this` means nothing on a CPU */
  for (size_t k = match(f, open) + 1; k < body0 && !is(f, k, ":") && !is(f, k, "->"); k++)
    if (addr_space(f, k)) blank(f, k);
  size_t nm = name_before(f, open, i);
  if (nm >= f->nt) nm = open - 1; /* operator@ */
  fdef *d = new_fdef(f);
  if (!d) return;
  text_of(f, nm, d->name, sizeof d->name);
  d->implicit = saw_operator || !is_id(f, nm) || (nm > 0 && is(f, nm - 1, "~")) ||
                (f->cls[0] && strcmp(d->name, f->cls) == 0) ||
                (nm > 1 && is(f, nm - 1, "::") && is(f, nm - 2, d->name));
  d->body0 = body0;
  d->body1 = body1;
  d->decl0 = start;
  d->kernel = kernel;
  d->is_template = tmpl;
  d->line = f->t[nm].line;
  d->col = f->t[nm].col;
  snprintf(d->host, sizeof d->host, "%s", host[0] ? host : d->name);
  if (kernel) {
    bool is_void = false;
    size_t void_tok = f->nt;
    for (size_t k = i; k < nm; k++)
      if (is(f, k, "void")) is_void = true, void_tok = k;
    /* inline: emitted only where its trampoline calls it (a function's
     * compile keeps one trampoline, sm_compile.c). It takes the place of the
     * word `kernel`, of the same length, so that columns in diagnostics stay
     * the user's; after `[[kernel]]` it is inserted. */
    size_t kernel_tok = f->nt;
    for (size_t k = i; k < nm && kernel_tok == f->nt; k++) {
      if (attr_start(f, k))
        k = match(f, k); /* [[kernel]] is not the word */
      else if (is(f, k, "kernel") && !f->t[k].done)
        kernel_tok = k;
    }
    if (!tmpl && kernel_tok < f->nt)
      replace_tok(f, kernel_tok, "inline");
    else if (!tmpl && void_tok < f->nt)
      add_edit(f, f->t[void_tok].off + f->t[void_tok].len, f->t[void_tok].off + f->t[void_tok].len,
               " inline");
    if (!is_void) {
      error_at(f, f->t[nm].line, f->t[nm].col, "kernel %s must return void", d->name);
      d->pbad = true;
    }
    if (!parse_params(f, open, d->name, &d->p, &d->np) || !assign_indices(f, d->p, d->np, d->name))
      d->pbad = true;
    if (!tmpl && !d->pbad) {
      kout *k = new_kout(f);
      if (!k) return;
      snprintf(k->host, sizeof k->host, "%s", d->host);
      snprintf(k->callee, sizeof k->callee, "%s", d->name);
      k->def = (int)(f->nf - 1);
      k->p = d->p;
      k->np = d->np;
      k->line = d->line;
      k->col = d->col;
      k->insert_at = f->t[body1].off + 1;
    }
  }
  scan_body(f, body0, body1);
}

/* Walks a declaration as the compiler will see it: `device`, `thread`,
 * `threadgroup` and removed qualifiers gone, `constant` as `const`, one
 * `const` of adjacent ones. */
typedef struct {
  const fe *f;
  size_t i, end;
  bool last_const;
} norm_it;
/* The next token (its index), or end; *is_const for const/constant. */
static size_t norm_next(norm_it *it, bool *is_const) {
  while (it->i < it->end) {
    size_t k = it->i++;
    bool cons = is(it->f, k, "constant"), c = cons || is(it->f, k, "const");
    if ((addr_space(it->f, k) && !cons) || (cons && it->f->t[k].done) || (c && it->last_const)) {
      continue;
    }
    it->last_const = c;
    *is_const = c;
    return k;
  }
  return it->end;
}

/* Declarations [a0, a1) and [b0, b1): whether they differ only in address
 * spaces (overloads on the address space of `this`, partial specializations
 * on that of a pointer: one function or type on a CPU). */
static bool same_but_address_spaces(const fe *f, size_t a0, size_t a1, size_t b0, size_t b1) {
  bool raw_same = a1 - a0 == b1 - b0;
  for (size_t k = 0; raw_same && k < a1 - a0; k++) raw_same = same_token(f, a0 + k, b0 + k);
  if (raw_same) return false; /* a redeclaration, as it is in MSL */
  norm_it x = {f, a0, a1, false}, y = {f, b0, b1, false};
  for (;;) {
    bool xc = false, yc = false;
    size_t a = norm_next(&x, &xc), b = norm_next(&y, &yc);
    if (a == a1 || b == b1) return a == a1 && b == b1;
    if (xc || yc) {
      if (xc != yc) return false;
      continue;
    }
    if (!same_token(f, a, b)) return false;
  }
}

static int cmp_off(const void *key, const void *t) {
  size_t k = *(const size_t *)key, o = ((const tok *)t)->off;
  return k < o ? -1 : k > o;
}

/* Drops declaration [a, b): its tokens become blanks (lines stay), and the
 * rewrites already made inside it are undone. */
static void drop_decl(fe *f, size_t a, size_t b) {
  size_t lo = f->t[a].off, hi = f->t[b - 1].off + f->t[b - 1].len;
  size_t n = 0;
  for (size_t e = 0; e < f->ne; e++) {
    bool inside = f->e[e].at >= lo && f->e[e].at < hi &&
                  bsearch(&f->e[e].at, f->t + a, b - a, sizeof *f->t, cmp_off);
    if (inside)
      free(f->e[e].text);
    else
      f->e[n++] = f->e[e];
  }
  f->ne = n;
  for (size_t k = a; k < b; k++) blank(f, k);
}

static size_t parse_scope(fe *f, size_t i) {
  /* declarations of this scope that name an address space */
  size_t(*seen)[2] = NULL;
  size_t nseen = 0, cap = 0;
  while (i < f->nt) {
    if (is(f, i, "}")) break;
    if (is(f, i, ";")) {
      i++;
      continue;
    }
    size_t before = i;
    parse_decl(f, &i);
    if (i <= before) i = before + 1;
    size_t end = i < f->nt ? i : f->nt;
    bool named = false;
    for (size_t k = before; k < end && !named; k++) named = addr_space(f, k);
    if (!named) continue;
    bool dup = false;
    for (size_t s = 0; s < nseen && !dup; s++)
      dup = same_but_address_spaces(f, seen[s][0], seen[s][1], before, end);
    if (dup) {
      drop_decl(f, before, end);
      continue;
    }
    size_t(*q)[2] = grow(seen, &cap, nseen, sizeof *seen, &f->oom);
    if (!q) break;
    seen = q;
    seen[nseen][0] = before;
    seen[nseen][1] = end;
    nseen++;
  }
  free(seen);
  return i;
}

/* ------------------------------------------------------------- token-level rewrites */
static void rewrite_tokens(fe *f) {
  bool any_defined = false;
  for (size_t i = 0; i < f->nt; i++) {
    tok *t = &f->t[i];
    if (t->done) continue;
    if (attr_start(f, i)) {
      i = strip_attr(f, i) - 1;
      continue;
    }
    if (t->kind == T_NUM) {
      const char *s = f->pp + t->off;
      bool hex = t->len > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
      char last = s[t->len - 1];
      if (!hex && (last == 'h' || last == 'H')) {
        char lit[80];
        snprintf(lit, sizeof lit, "%.*s_h", (int)(t->len - 1 < 70 ? t->len - 1 : 70), s);
        replace_tok(f, i, lit);
      } else if ((last >= '0' && last <= '9') || last == '.') {
        /* a floating literal without a suffix (`0.5`, `1e-6`, `2.`, `0x1p-3`)
         * is a float in MSL, which has no double: `max(x, 0.5)` takes two
         * floats and `x * 0.1` rounds as float * float, never in double */
        bool fl = false;
        for (size_t k = 0; k < t->len; k++) {
          char c = s[k];
          if (c == '.' || (hex ? (c == 'p' || c == 'P') : (c == 'e' || c == 'E'))) fl = true;
        }
        if (fl && t->len < 70) {
          char lit[80];
          snprintf(lit, sizeof lit, "%.*sf", (int)t->len, s);
          replace_tok(f, i, lit);
        }
      }
      continue;
    }
    if (t->kind != T_ID) continue;
    if (is(f, i, "double")) {
      error_at(f, t->line, t->col, "'double' is not supported in Metal");
      continue;
    }
    if (is(f, i, "kernel") || is(f, i, "device") || is(f, i, "constant") || is(f, i, "thread") ||
        is(f, i, "threadgroup")) {
      if (is(f, i - 1, ".") || is(f, i - 1, "->") || is(f, i - 1, "::")) continue;
      /* constant memory is read-only: writing through it fails to compile
       * (`const constant T &` and `constant const T` are const once) */
      if (is(f, i, "constant") && !is(f, i - 1, "const") && !is(f, i + 1, "const"))
        replace_tok(f, i, "const");
      else
        blank(f, i);
      continue;
    }
    /* coherent(device) (MSL 3.2): softmetal's device memory is coherent */
    if (is(f, i, "coherent") && is(f, i + 1, "(") && is_id(f, i + 2) && is(f, i + 3, ")")) {
      for (size_t k = i; k <= i + 3; k++) blank(f, k);
      i += 3;
      continue;
    }
    if (is(f, i, "is_function_constant_defined") && is(f, i + 1, "(") && is_id(f, i + 2) &&
        is(f, i + 3, ")")) {
      char name[128];
      text_of(f, i + 2, name, sizeof name);
      int c = find_const(f, name);
      if (c < 0 || f->c[c].index < 0) {
        error_at(f, t->line, t->col, "is_function_constant_defined(%s): not a function constant",
                 name);
        continue;
      }
      f->c[c].optional = true;
      any_defined = true;
      char rep[200];
      snprintf(rep, sizeof rep, "(sm_fcdef_%s)", name);
      add_edit(f, t->off, f->t[i + 3].off + 1, rep);
      for (size_t k = i; k <= i + 3; k++) f->t[k].done = true;
      i += 3;
      continue;
    }
    for (size_t w = 0; w < sizeof REFUSED_WORDS / sizeof *REFUSED_WORDS; w++)
      if (is(f, i, REFUSED_WORDS[w])) {
        error_at(f, t->line, t->col,
                 "'%s' is not supported by softmetal (compute kernels over buffers only: no "
                 "textures, samplers, imageblocks or ray tracing)",
                 REFUSED_WORDS[w]);
        break;
      }
  }
  (void)any_defined;
}

/* ------------------------------------------------------------- kernel analysis */
static const char *const SYNC_PREFIXES[] = {"threadgroup_barrier", "simdgroup_barrier", "simd_",
                                            "quad_", "simdgroup_"};
/* Whether identifier w is a barrier or a SIMD-group function (by name). */
static bool sync_word(const char *w) {
  for (size_t s = 0; s < sizeof SYNC_PREFIXES / sizeof *SYNC_PREFIXES; s++)
    if (strncmp(w, SYNC_PREFIXES[s], strlen(SYNC_PREFIXES[s])) == 0) return true;
  return false;
}

/* Whether token i is inside an attribute [[...]] (built-in names there are
 * not calls). */
static bool attr_word(const fe *f, size_t i) {
  for (size_t k = i; k-- > 0 && i - k < 16;) {
    if (is(f, k, "]")) return false;
    if (attr_start(f, k)) return true;
  }
  return false;
}

/* Functions (by name) and constants a kernel reaches; whether it synchronises. */
static void reach(const fe *f, int def, bool *fn_seen, bool *c_seen, bool *sync) {
  if (fn_seen[def]) return;
  fn_seen[def] = true;
  const fdef *d = &f->f[def];
  for (size_t i = d->body0; i <= d->body1 && i < f->nt; i++) {
    if (!is_id(f, i)) continue;
    char w[128];
    text_of(f, i, w, sizeof w);
    if (sync_word(w)) *sync = true;
    int c = find_const(f, w);
    if (c >= 0 && !c_seen[c]) {
      c_seen[c] = true;
      /* a derived constant reaches what its initialiser reads */
      for (size_t k = f->c[c].init0; k < f->c[c].init1; k++) {
        char v[128];
        if (!is_id(f, k)) continue;
        text_of(f, k, v, sizeof v);
        int c2 = find_const(f, v);
        if (c2 >= 0) c_seen[c2] = true;
      }
    }
    for (size_t g = 0; g < f->nf; g++)
      if (!fn_seen[g] && strcmp(f->f[g].name, w) == 0) reach(f, (int)g, fn_seen, c_seen, sync);
  }
}

/* ------------------------------------------------- guarded constant uses
 * A function constant without a value is an error at specialization only
 * where the function still uses it once the given constants are folded:
 * a use inside `if (cond)` (or its else), with cond made of constants
 * alone, is dead when cond folds the other way (a kernel that reads
 * constant B only under `if (A)` specializes with A false and no B, as on
 * Metal). The front end records such guards; sm_msl.c folds them. */

/* Whether tokens [a, b) are a condition of function constants alone:
 * integer and bool constants, integer literals, true/false, ! && || and
 * comparisons, + - and parentheses (what sm_msl.c folds). */
static bool constant_condition(const fe *f, size_t a, size_t b) {
  static const char *const OPS[] = {
      "(", ")", "!", "&&", "||", "==", "!=", "<", ">", "<=", ">=", "+", "-"};
  if (a >= b) return false;
  for (size_t k = a; k < b; k++) {
    char w[128];
    text_of(f, k, w, sizeof w);
    bool ok = false;
    if (f->t[k].kind == T_NUM) {
      size_t d = strspn(w, "0123456789");
      ok = d > 0 && (w[d] == 0 || ((w[d] == 'u' || w[d] == 'U') && w[d + 1] == 0));
    } else if (f->t[k].kind == T_PUN) {
      for (size_t o = 0; o < sizeof OPS / sizeof *OPS && !ok; o++) ok = strcmp(w, OPS[o]) == 0;
    } else if (f->t[k].kind == T_ID) {
      int c = find_const(f, w);
      ok = strcmp(w, "true") == 0 || strcmp(w, "false") == 0 ||
           (c >= 0 && f->c[c].index >= 0 && f->c[c].size <= 8 && f->c[c].mtl_type != 3 &&
            f->c[c].mtl_type != 16 && f->c[c].mtl_type != 121 && !strchr(f->c[c].type, ' ') &&
            strspn(f->c[c].type + strlen(f->c[c].type) - 1, "234") == 0);
    }
    if (!ok) return false;
  }
  return true;
}

/* The last token of the statement starting at s (within [s, end]). */
static size_t stmt_last(const fe *f, size_t s, size_t end, int depth) {
  if (s > end || depth > 64) return end;
  if (is(f, s, "{")) return match(f, s);
  if (is(f, s, "do")) { /* do BODY while (COND); */
    size_t e = stmt_last(f, s + 1, end, depth + 1);
    if (e >= end || !is(f, e + 1, "while") || !is(f, e + 2, "(")) return end;
    size_t cp = match(f, e + 2);
    return cp < end && is(f, cp + 1, ";") ? cp + 1 : end;
  }
  if ((is(f, s, "if") || is(f, s, "for") || is(f, s, "while") || is(f, s, "switch")) &&
      is(f, s + 1, "(")) {
    size_t cp = match(f, s + 1);
    if (cp >= end) return end;
    size_t e = stmt_last(f, cp + 1, end, depth + 1);
    if (is(f, s, "if") && e < end && is(f, e + 1, "else"))
      return stmt_last(f, e + 2, end, depth + 1);
    return e;
  }
  for (size_t k = s; k <= end; k++) {
    if (is(f, k, ";")) return k;
    if (is(f, k, "(") || is(f, k, "[") || is(f, k, "{")) k = match(f, k);
  }
  return end;
}

/* What need_walk keeps for one kernel: per function, the ifs of its body
 * whose condition is a constant condition (found once), whether it was
 * walked unguarded and the last guard it was walked under. */
typedef struct {
  size_t k, cp, e, e2; /* `if`, its ')', the then part's last token, the else part's (or 0) */
} guard_if;
typedef struct {
  guard_if **ifs;
  size_t *nifs;
  bool *found, *plain;
  char **last;
  bool *always; /* [nc] */
  buf *guards;  /* [nc] */
  bool oom;
} need_ctx;

static void find_ifs(const fe *f, int def, need_ctx *x) {
  if (x->found[def]) return;
  x->found[def] = true;
  const fdef *d = &f->f[def];
  for (size_t k = d->body0; k <= d->body1 && k < f->nt; k++) {
    if (!is(f, k, "if") || !is(f, k + 1, "(")) continue;
    size_t cp = match(f, k + 1);
    if (cp >= d->body1 || !constant_condition(f, k + 2, cp)) continue;
    guard_if *a = realloc(x->ifs[def], (x->nifs[def] + 1) * sizeof *a);
    if (!a) {
      x->oom = true;
      return;
    }
    x->ifs[def] = a;
    size_t e = stmt_last(f, cp + 1, d->body1, 0);
    size_t e2 = e < d->body1 && is(f, e + 1, "else") ? stmt_last(f, e + 2, d->body1, 0) : 0;
    a[x->nifs[def]++] = (guard_if){k, cp, e, e2};
  }
}

/* The guard of the use at token i of function def's body: "( c1 ) && ! ( c2 )"
 * for the ifs with constant conditions around it, after what out holds. */
static void guard_of(const fe *f, int def, size_t i, const need_ctx *x, buf *out) {
  for (size_t j = 0; j < x->nifs[def]; j++) {
    const guard_if *g = &x->ifs[def][j];
    if (g->k >= i) break;
    if (i <= g->cp) continue;
    bool in_then = i <= g->e, in_else = !in_then && g->e2 && i <= g->e2;
    if (!in_then && !in_else) continue;
    if (out->n) put_s(out, " && ");
    put_s(out, in_else ? "! ( " : "( ");
    span_text(f, g->k + 2, g->cp, out);
    put_s(out, " )");
  }
}

/* A use of constant c under guard g (empty: unguarded). */
static void note_use(int c, const char *g, need_ctx *x) {
  if (x->always[c]) return;
  if (!*g) {
    x->always[c] = true;
    return;
  }
  buf *b = &x->guards[c];
  buf alt = {0};
  put_s(&alt, "( ");
  put_s(&alt, g);
  put_s(&alt, " )");
  if (alt.oom) x->oom = true;
  /* the same alternative already there (whole, between "||"s) */
  for (const char *q = b->p; alt.p && q && (q = strstr(q, alt.p)) != NULL; q++) {
    bool starts = q == b->p || (q - b->p >= 4 && strncmp(q - 4, " || ", 4) == 0);
    bool ends = q[alt.n] == 0 || strncmp(q + alt.n, " || ", 4) == 0;
    if (starts && ends) {
      free(alt.p);
      return;
    }
  }
  if (b->n) put_s(b, " || ");
  if (alt.p) sm__text_put(b, alt.p, alt.n);
  free(alt.p);
}

/* Walks function def as reach() does, under the guard outer (empty: none):
 * always[c] when some use of c is unguarded, else guards[c] the
 * disjunction of the guards of its uses. */
static void need_walk(const fe *f, int def, const char *outer, need_ctx *x, int depth) {
  if (depth > 8) outer = ""; /* too deep to track: unguarded */
  if (x->plain[def]) return;
  if (!*outer) {
    x->plain[def] = true;
  } else {
    if (x->last[def] && strcmp(x->last[def], outer) == 0) return;
    free(x->last[def]);
    x->last[def] = strdup(outer);
  }
  find_ifs(f, def, x);
  const fdef *d = &f->f[def];
  for (size_t i = d->body0; i <= d->body1 && i < f->nt && !x->oom; i++) {
    if (!is_id(f, i)) continue;
    char w[128];
    text_of(f, i, w, sizeof w);
    int c = find_const(f, w);
    bool call = false;
    for (size_t g = 0; g < f->nf && !call; g++) call = strcmp(f->f[g].name, w) == 0;
    if (c < 0 && !call) continue;
    buf g = {0};
    put_s(&g, outer);
    guard_of(f, def, i, x, &g);
    const char *gt = g.p ? g.p : "";
    if (c >= 0) {
      note_use(c, gt, x);
      /* a derived constant reads its initialiser's constants */
      for (size_t k = f->c[c].init0; k < f->c[c].init1; k++) {
        char v[128];
        if (!is_id(f, k)) continue;
        text_of(f, k, v, sizeof v);
        int c2 = find_const(f, v);
        if (c2 >= 0) note_use(c2, gt, x);
      }
    }
    if (call)
      for (size_t fn = 0; fn < f->nf; fn++)
        if (strcmp(f->f[fn].name, w) == 0) need_walk(f, (int)fn, gt, x, depth + 1);
    if (g.oom) x->oom = true;
    free(g.p);
  }
}

/* The features (SM_FEATURE_* of sm_internal.h: 1 SIMD-group permutes, 2
 * SIMD-group reductions, 4 SIMD-group matrices) that the bodies of the
 * functions seen use, by name: pipeline creation refuses them on a device
 * without them, as Metal does. */
static unsigned features_of(const fe *f, const bool *seen, const bool *global) {
  static const char *const REDUCTIONS[] = {"simd_sum", "simd_product", "simd_min", "simd_max",
                                           "simd_and", "simd_or",      "simd_xor"};
  unsigned bits = 0;
  for (size_t g = 0; g < f->nf; g++) {
    if (!seen[g] && !global[g]) continue;
    for (size_t i = f->f[g].body0; i <= f->f[g].body1 && i < f->nt; i++) {
      if (!is_id(f, i)) continue;
      char w[128];
      text_of(f, i, w, sizeof w);
      if (strncmp(w, "simd_shuffle", 12) == 0 || strncmp(w, "simd_broadcast", 14) == 0) bits |= 1u;
      if (strncmp(w, "simd_prefix_", 12) == 0) bits |= 2u;
      for (size_t r = 0; r < sizeof REDUCTIONS / sizeof *REDUCTIONS; r++)
        if (strcmp(w, REDUCTIONS[r]) == 0) bits |= 2u;
      if (strncmp(w, "simdgroup_", 10) == 0 && strcmp(w, "simdgroup_barrier") != 0 &&
          strcmp(w, "simdgroup_index_in_threadgroup") != 0)
        bits |= 4u;
      if (strcmp(w, "make_filled_simdgroup_matrix") == 0) bits |= 4u;
    }
  }
  return bits;
}

/* The builtin's value: in a trampoline from t; in a threadgroup loop
 * (in_group) the per-thread ones from the loop's position p. */
static void put_builtin(buf *b, const char *text, bool in_group) {
  static const char *const PER_THREAD[] = {"tpig", "tpitg", "tiitg", "lane", "simdgroup"};
  for (const char *s = text; *s;) {
    bool done = false;
    for (size_t i = 0; in_group && !done && i < sizeof PER_THREAD / sizeof *PER_THREAD; i++) {
      size_t n = strlen(PER_THREAD[i]);
      if (strncmp(s, "t->", 3) == 0 && strncmp(s + 3, PER_THREAD[i], n) == 0 &&
          !isalnum((unsigned char)s[3 + n]) && s[3 + n] != '_') {
        sm__text_printf(b, "p.%s", PER_THREAD[i]);
        s += 3 + n;
        done = true;
      }
    }
    if (!done) sm__text_put(b, s++, 1);
  }
}

/* The call of kernel n with its arguments (from t, or in_group from p). */
static void emit_call(fe *f, size_t n, buf *b, bool in_group) {
  const kout *k = &f->k[n];
  sm__text_printf(b, "%s(", k->callee);
  for (int i = 0; i < k->np; i++) {
    const param *p = &k->p[i];
    char P[700];
    snprintf(P, sizeof P, "::sm::param_t<decltype(&%s), %d>", k->callee, i);
    if (i) put_s(b, ", ");
    if (p->fc >= 0) sm__text_printf(b, "!(%s) ? ::sm::absent_arg<%s>() : ", f->c[p->fc].name, P);
    if (p->kind == P_BUFFER)
      sm__text_printf(b, "::sm::buffer_arg<%s>(t, %d)", P, p->index);
    else if (p->kind == P_TG)
      sm__text_printf(b, "(%s)(t->tgmem[%d])", P, p->index);
    else if (BUILTINS[p->builtin].vector) {
      sm__text_printf(b, "::sm::pick<%s>(", P);
      put_builtin(b, BUILTINS[p->builtin].expr, in_group);
      put_s(b, ")");
    } else {
      sm__text_printf(b, "(%s)(", P);
      put_builtin(b, BUILTINS[p->builtin].expr, in_group);
      put_s(b, ")");
    }
  }
  put_s(b, ")");
}

/* sm_tramp_N runs one thread; sm_group_N (kernels without barriers or
 * SIMD-group functions) all threads of a threadgroup, a loop that clang
 * inlines the kernel into (sm::run_group). */
static void emit_trampoline(fe *f, size_t n, buf *b, const bool *c_seen, bool sync) {
  const kout *k = &f->k[n];
  /* k->pre instantiates the kernel (a deduced explicit instantiation): it is
   * guarded with the instantiation, so only this kernel's compile makes it. */
  if (k->inst) {
    put_s(b, k->pre);
    put_s(b, SM_GUARD_CLOSE);
  } else if (k->pre[0]) {
    sm__text_printf(b, SM_GUARD_OPEN "%zu*/", n);
    put_s(b, k->pre);
    put_s(b, SM_GUARD_CLOSE);
  }
  /* the bodies are guarded: another kernel's compile keeps empty entries */
  sm__text_printf(
      b, " extern \"C\" void sm_tramp_%zu(sm_thread *t) { " SM_GUARD_OPEN "%zu*/ ::sm::cur = t; ",
      n, n);
  if (f->nc) put_s(b, "::sm::fc_load(t); ");
  emit_call(f, n, b, false);
  put_s(b, "; " SM_GUARD_CLOSE " }");
  if (!sync) {
    sm__text_printf(
        b, " extern \"C\" void sm_group_%zu(sm_thread *t) { " SM_GUARD_OPEN "%zu*/ ::sm::cur = t; ",
        n, n);
    if (f->nc) put_s(b, "::sm::fc_load(t); ");
    put_s(b, "::sm::run_group(t, [&](const ::sm::pos &p) { ");
    emit_call(f, n, b, true);
    put_s(b, "; }); " SM_GUARD_CLOSE " }");
  }
  (void)c_seen;
  sm__text_printf(b, " extern \"C\" const uint32_t sm_written_%zu = 0u " SM_GUARD_OPEN "%zu*/", n,
                  n);
  for (int i = 0; i < k->np; i++)
    if (k->p[i].kind == P_BUFFER && !k->p[i].cons)
      sm__text_printf(b, " | (::sm::writes<::sm::param_t<decltype(&%s), %d>>() ? %uu : 0u)",
                      k->callee, i, 1u << k->p[i].index);
  put_s(b, SM_GUARD_CLOSE ";");
}

/* Brackets must pair before the parser walks them. */
static bool balanced(fe *f) {
  size_t *stack = malloc((f->nt + 1) * sizeof *stack);
  size_t depth = 0;
  bool ok = stack != NULL;
  if (!stack) f->oom = true;
  for (size_t i = 0; ok && i < f->nt; i++) {
    if (f->t[i].kind != T_PUN || f->t[i].len != 1) continue;
    char c = f->pp[f->t[i].off];
    if (c == '(' || c == '[' || c == '{') {
      stack[depth++] = i;
    } else if (c == ')' || c == ']' || c == '}') {
      char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (depth == 0 || f->pp[f->t[stack[depth - 1]].off] != want) {
        error_at(f, f->t[i].line, f->t[i].col, "'%c' does not close anything", c);
        ok = false;
      } else {
        depth--;
      }
    }
  }
  if (ok && depth) {
    const tok *t = &f->t[stack[depth - 1]];
    error_at(f, t->line, t->col, "'%c' is never closed", f->pp[t->off]);
    ok = false;
  }
  free(stack);
  return ok;
}

static int cmp_edit(const void *a, const void *b) {
  const edit *x = a, *y = b;
  if (x->at != y->at) return x->at < y->at ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* ------------------------------------------------- reconvergence
 * A GPU runs the lanes of a SIMD group together and reconverges them where
 * a branch or a loop ends; softmetal runs each lane on to its next
 * synchronisation in turn. So, in every function that can synchronise (a
 * barrier or a SIMD-group function in its body, directly or through a call),
 * the front end adds SIMD-group rendezvous (sm::reconverge):
 * - after every loop that synchronises inside: no lane runs the code after
 *   the loop while lanes of its SIMD group are still in its last iteration,
 *   reading what that code writes;
 * - before and after every if, for, while or do statement that writes
 *   threadgroup memory: every lane has made the reads before it (which a lane
 *   inside it may overwrite, as `if (lane == 0) tg[0] = total;` after all
 *   lanes read tg[0]) before any lane enters, and every lane inside has made
 *   its writes before any lane goes on to read them.
 * Straight-line code between two rendezvous still runs lane after lane. */

typedef struct {
  const char *name;
  size_t def;
} fname;
typedef struct {
  const fe *f;
  fname *by_name; /* the functions, sorted by name */
  bool *syncs;    /* [nf]: the function can reach a synchronisation */
} sync_map;

static int cmp_fname(const void *a, const void *b) {
  return strcmp(((const fname *)a)->name, ((const fname *)b)->name);
}

/* Whether the identifier at token i synchronises or names a function that can. */
static bool token_syncs(const sync_map *m, size_t i) {
  const fe *f = m->f;
  char w[128];
  text_of(f, i, w, sizeof w);
  if (sync_word(w)) return true;
  size_t lo = 0, hi = f->nf;
  while (lo < hi) { /* the first function named w */
    size_t mid = (lo + hi) / 2;
    if (strcmp(m->by_name[mid].name, w) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (; lo < f->nf && strcmp(m->by_name[lo].name, w) == 0; lo++)
    if (m->syncs[m->by_name[lo].def]) return true;
  return false;
}

static bool range_syncs(const sync_map *m, size_t a, size_t b) {
  for (size_t i = a; i <= b && i < m->f->nt; i++)
    if (is_id(m->f, i) && !attr_word(m->f, i) && token_syncs(m, i)) return true;
  return false;
}

static bool is_constexpr(const fe *f, const fdef *d) {
  for (size_t i = d->decl0; i < d->body0 && i < f->nt; i++)
    if (is(f, i, "constexpr") || is(f, i, "consteval")) return true;
  return false;
}

/* Whether token i is a name in names[0, n) (token indices). */
static bool in_names(const fe *f, const size_t *names, size_t n, size_t i) {
  for (size_t k = 0; k < n; k++)
    if (same_token(f, names[k], i)) return true;
  return false;
}

/* The names declared threadgroup in tokens [a, b) (parameters and locals:
 * `threadgroup T *p`, `threadgroup T x[N]`), as token indices; a cast adds
 * its type's name, which is never assigned. */
static size_t *threadgroup_names(fe *f, size_t a, size_t b, size_t *n) {
  size_t *names = NULL, cap = 0;
  *n = 0;
  for (size_t i = a; i < b && i < f->nt; i++) {
    if (!is(f, i, "threadgroup") || attr_word(f, i)) continue;
    size_t last = 0;
    for (size_t j = i + 1; j < b; j++) {
      if (is(f, j, "<")) {
        j = match_angle(f, j) - 1;
        continue;
      }
      if (is(f, j, ",") || is(f, j, ")") || is(f, j, ";") || is(f, j, "=") || is(f, j, "[") ||
          is(f, j, "{") || is(f, j, ":"))
        break;
      if (is_id(f, j)) last = j;
    }
    if (!last) continue;
    size_t *g = grow(names, &cap, *n, sizeof *g, &f->oom);
    if (!g) break;
    names = g;
    names[(*n)++] = last;
  }
  return names;
}

static bool assigns(const fe *f, size_t i) {
  static const char *const ops[] = {
      "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "++", "--", "<<=", ">>="};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    if (is(f, i, ops[k])) return true;
  return false;
}

/* Whether tokens [a, b] assign through a threadgroup name: `name = `,
 * `name[i] += `, `name[i].x = `, `name->m = `, `++name[i]`. */
static bool writes_threadgroup(const fe *f, const size_t *names, size_t n, size_t a, size_t b) {
  for (size_t j = a; j <= b && j < f->nt; j++) {
    if (!is_id(f, j) || !in_names(f, names, n, j)) continue;
    if (j > 0 && (is(f, j - 1, "++") || is(f, j - 1, "--"))) return true;
    size_t p = j + 1;
    for (;;) {
      if (is(f, p, "["))
        p = match(f, p) + 1;
      else if ((is(f, p, ".") || is(f, p, "->")) && is_id(f, p + 1))
        p += 2;
      else
        break;
    }
    if (p <= b && assigns(f, p)) return true;
  }
  return false;
}

static void reconverge(fe *f) {
  sync_map m = {f, malloc((f->nf + 1) * sizeof(fname)), calloc(f->nf + 1, sizeof(bool))};
  bool *handled = calloc(f->nt + 1, sizeof *handled); /* statement keywords seen (and do's while) */
  bool *after = calloc(f->nt + 1, sizeof *after);     /* a rendezvous follows this token */
  if (!m.by_name || !m.syncs || !handled || !after) {
    f->oom = true;
    goto out;
  }
  for (size_t g = 0; g < f->nf; g++) m.by_name[g] = (fname){f->f[g].name, g};
  qsort(m.by_name, f->nf, sizeof *m.by_name, cmp_fname);
  for (bool changed = true; changed;) { /* until no caller learns it can synchronise */
    changed = false;
    for (size_t g = 0; g < f->nf; g++)
      if (!m.syncs[g] && range_syncs(&m, f->f[g].body0, f->f[g].body1)) m.syncs[g] = changed = true;
  }
  for (size_t g = 0; g < f->nf; g++) {
    const fdef *d = &f->f[g];
    if (!m.syncs[g] || is_constexpr(f, d)) continue;
    size_t ntg = 0;
    size_t *tg = threadgroup_names(f, d->decl0, d->body1, &ntg);
    for (size_t k = d->body0 + 1; k < d->body1 && k < f->nt; k++) {
      bool loop = is(f, k, "do") || ((is(f, k, "for") || is(f, k, "while")) && is(f, k + 1, "("));
      bool branch = is(f, k, "if") && is(f, k + 1, "(");
      if ((!loop && !branch) || handled[k]) continue;
      handled[k] = true;
      size_t last = stmt_last(f, k, d->body1, 0);
      if (last >= d->body1) continue;
      if (is(f, k, "do")) handled[stmt_last(f, k + 1, d->body1, 0) + 1] = true; /* its while */
      /* only a statement of a block: the calls go before and after it */
      bool in_block =
          is(f, k - 1, ";") || is(f, k - 1, "{") || is(f, k - 1, "}") || is(f, k - 1, ":");
      if (!in_block || f->t[k].done || f->t[last].done) continue;
      bool writes = ntg && writes_threadgroup(f, tg, ntg, k, last);
      if (writes && !after[k - 1]) { /* after the token before it, so that a loop's
                                        `#pragma clang loop` stays on the loop */
        size_t at = f->t[k - 1].off + f->t[k - 1].len;
        add_edit(f, at, at, " ::sm::reconverge();");
        after[k - 1] = true;
      }
      if (writes || (loop && range_syncs(&m, k, last))) {
        size_t at = f->t[last].off + f->t[last].len;
        if (!after[last]) add_edit(f, at, at, " ::sm::reconverge();");
        after[last] = true;
      }
    }
    free(tg);
  }
out:
  free(m.by_name);
  free(m.syncs);
  free(handled);
  free(after);
}

/* ------------------------------------------------------------- argument buffers */
/* After each struct of program_source (at namespace scope) that has
 * [[id(k)]] members or device/constant pointer members, defines
 * sm_argbuf_layout_of(const S *): its members' ids and clang's offsets and
 * sizes (metal_stdlib's sm::argbuf_of finds it by ADL). A struct with a
 * member softmetal cannot describe (a bit-field, a reference, a nested
 * definition) gets none, and argument encoders refuse it. */
static bool in_body(const fe *f, size_t i) {
  for (size_t g = 0; g < f->nf; g++)
    if (i > f->f[g].body0 && i < f->f[g].body1) return true;
  return false;
}

static void argbuf_struct(fe *f, size_t name, size_t open, size_t close, size_t semi) {
  buf m = {0};
  char sname[128];
  text_of(f, name, sname, sizeof sname);
  bool wanted = false, bad = false;
  int count = 0;
  size_t i = open + 1;
  while (i < close && !bad) {
    size_t a = i, b = i;
    while (b < close && !is(f, b, ";")) {
      if (is(f, b, "{")) bad = true;
      b = (is(f, b, "(") || is(f, b, "[")) ? match(f, b) + 1 : b + 1;
    }
    i = b + 1;
    while (a + 1 < b && (is(f, a, "public") || is(f, a, "private") || is(f, a, "protected")) &&
           is(f, a + 1, ":"))
      a += 2;
    if (a >= b) continue;
    if (is(f, a, "static") || is(f, a, "using") || is(f, a, "typedef") || is(f, a, "friend") ||
        is(f, a, "template") || is(f, a, "enum") || is(f, a, "constexpr") ||
        is(f, a, "static_assert"))
      continue;
    bool addr = false, star = false, fn = false;
    for (size_t k = a; k < b; k++) {
      if (attr_start(f, k)) {
        k = match(f, k);
        continue;
      }
      if (is(f, k, "device") || is(f, k, "constant")) addr = true;
      if (is(f, k, "*")) star = true;
      if (is(f, k, "&") || is(f, k, "&&") || is(f, k, ":")) bad = true;
      if (is(f, k, "(") || is(f, k, "operator")) fn = true;
    }
    if (fn) continue; /* a member function or constructor */
    if (addr && star) wanted = true;
    /* declarators, split at top-level commas */
    size_t d = a;
    while (d < b && !bad) {
      size_t e = d;
      while (e < b && !is(f, e, ",")) {
        size_t next = e + 1, to;
        if (is(f, e, "<") && (to = match_angle(f, e)) <= b)
          next = to;
        else if (is(f, e, "[") && (to = match(f, e)) < b)
          next = to + 1;
        e = next;
      }
      size_t nm = f->nt;
      int id = -1;
      for (size_t k = d; k < e; k++) {
        if (attr_start(f, k)) {
          attr_item it[8];
          int n = 0;
          size_t after = read_attr(f, k, it, &n, 8);
          for (int q = 0; q < n; q++)
            if (is(f, it[q].name, "id")) {
              if (!parse_uint(f, it[q].arg0, it[q].arg1, &id)) bad = true;
              wanted = true;
            }
          k = after - 1;
          continue;
        }
        if (is(f, k, "[") || is(f, k, "=")) break;
        if (is_id(f, k)) nm = k;
      }
      if (nm >= f->nt) {
        bad = true;
        break;
      }
      char mname[128];
      text_of(f, nm, mname, sizeof mname);
      sm__text_printf(&m,
                      "%s::sm::argbuf_member<decltype(%s::%s)>(%uu, __builtin_offsetof(%s, %s))",
                      count ? ", " : "", sname, mname, id < 0 ? SM_ARGBUF_IMPLICIT : (unsigned)id,
                      sname, mname);
      count++;
      d = e + 1;
    }
  }
  if (wanted && !bad && count > 0 && !m.oom) {
    buf t = {0};
    sm__text_printf(&t,
                    " inline const ::sm_argbuf_layout *sm_argbuf_layout_of(const %s *) { "
                    "static const ::sm_argbuf_member sm_m[] = {%s}; static const "
                    "::sm_argbuf_layout sm_l = {sizeof(%s), alignof(%s), %du, sm_m}; "
                    "return &sm_l; }",
                    sname, m.p, sname, sname, count);
    if (t.oom)
      f->oom = true;
    else
      add_edit(f, f->t[semi].off + 1, f->t[semi].off + 1, t.p);
    free(t.p);
  }
  if (m.oom) f->oom = true;
  free(m.p);
}

static void argbuf_structs(fe *f) {
  size_t done_to = 0; /* the last struct described ends here: nested ones are skipped */
  for (size_t i = 0; i + 2 < f->nt && !f->oom; i++) {
    if (!is(f, i, "struct") && !is(f, i, "class")) continue;
    if (i < done_to || (i > 0 && (is(f, i - 1, ">") || is(f, i - 1, "enum")))) continue;
    size_t k = i + 1;
    while (k < f->nt && (attr_start(f, k) || is(f, k, "alignas")))
      k = is(f, k, "alignas") ? match(f, k + 1) + 1 : match(f, k) + 1;
    if (!is_id(f, k)) continue;
    size_t open = k + 1;
    if (is(f, open, "final")) open++;
    if (!is(f, open, "{")) continue;
    size_t close = match(f, open);
    if (close >= f->nt || !is(f, close + 1, ";") || in_body(f, i)) continue;
    argbuf_struct(f, k, open, close, close + 1);
    done_to = close;
  }
}

char *sm__front(const char *pp, size_t len, const char *src_path, char **err) {
  fe f;
  memset(&f, 0, sizeof f);
  f.src_path = src_path;
  f.pp = pp;
  f.len = len;
  *err = NULL;
  scan_pp(&f);
  if (balanced(&f)) {
    size_t end = parse_scope(&f, 0);
    if (end < f.nt) error_at(&f, f.t[end].line, f.t[end].col, "unbalanced '}'");
    rewrite_tokens(&f);
    argbuf_structs(&f);
    reconverge(&f);
  }
  buf out = {0}, table = {0}, entries = {0}, manifest = {0};
  bool *fn_seen = calloc(f.nf + 1, sizeof *fn_seen);
  bool *c_seen = calloc(f.nc + 1, sizeof *c_seen);
  if (!fn_seen || !c_seen) f.oom = true;
  need_ctx need = {calloc(f.nf + 1, sizeof(guard_if *)), calloc(f.nf + 1, sizeof(size_t)),
                   calloc(f.nf + 1, sizeof(bool)),       calloc(f.nf + 1, sizeof(bool)),
                   calloc(f.nf + 1, sizeof(char *)),     calloc(f.nc + 1, sizeof(bool)),
                   calloc(f.nc + 1, sizeof(buf)),        false};
  if (!need.ifs || !need.nifs || !need.found || !need.plain || !need.last || !need.always ||
      !need.guards)
    f.oom = true;
  /* trampolines and the table */
  put_s(&table, "\n# 1 \"softmetal_kernel_table\"\n");
  for (size_t n = 0; n < f.nk && !f.oom; n++)
    sm__text_printf(
        &table,
        "extern \"C\" void sm_tramp_%zu(sm_thread *); extern \"C\" const uint32_t "
        "sm_written_%zu; extern \"C\" void sm_group_%zu(sm_thread *); extern \"C\" const "
        "sm_argbuf_layout *sm_argbuf_%zu(unsigned);\n",
        n, n, n, n);
  /* What every kernel may reach: code outside the functions found (lambdas
   * and initialisers at namespace scope, class heads), the functions it calls
   * by name, operators, constructors and destructors (called without their
   * name), and code in headers the front end does not see. */
  bool global_sync = f.foreign;
  bool *c_global = calloc(f.nc + 1, sizeof *c_global);
  bool *fn_global = calloc(f.nf + 1, sizeof *fn_global);
  bool *covered = calloc(f.nt + 1, sizeof *covered);
  if (!c_global || !fn_global || !covered) f.oom = true;
  for (size_t d = 0; d < f.nf && covered; d++)
    for (size_t i = f.f[d].decl0; i <= f.f[d].body1 && i < f.nt; i++) covered[i] = true;
  for (size_t c = 0; c < f.nc && covered; c++)
    for (size_t i = f.c[c].decl0; i <= f.c[c].decl1 && i < f.nt; i++) covered[i] = true;
  for (size_t i = 0; i < f.nt && !f.oom; i++) {
    if (covered[i] || !is_id(&f, i) || attr_word(&f, i)) continue;
    char w[128];
    text_of(&f, i, w, sizeof w);
    if (sync_word(w)) global_sync = true;
    int c = find_const(&f, w);
    if (c >= 0) c_global[c] = true;
    if (f.t[i].proto || !(is(&f, i + 1, "(") || is(&f, i + 1, "{"))) continue;
    for (size_t g = 0; g < f.nf; g++)
      if (!fn_global[g] && strcmp(f.f[g].name, w) == 0)
        reach(&f, (int)g, fn_global, c_global, &global_sync);
  }
  for (size_t g = 0; g < f.nf && !f.oom; g++)
    if (f.f[g].implicit) reach(&f, (int)g, fn_global, c_global, &global_sync);
  /* The function whose body holds each threadgroup variable (-1: none) */
  long *tg_owner = calloc((size_t)f.tg_ids + 1, sizeof *tg_owner);
  if (!tg_owner) f.oom = true;
  for (uint32_t v = 0; v < f.tg_ids && tg_owner; v++) {
    tg_owner[v] = -1;
    for (size_t g = 0; g < f.nf; g++)
      if (f.tg_at[v] > f.f[g].body0 && f.tg_at[v] < f.f[g].body1 &&
          (tg_owner[v] < 0 || f.f[g].body0 > f.f[tg_owner[v]].body0))
        tg_owner[v] = (long)g;
  }
  buf tg_table = {0}, argbufs = {0};
  for (size_t n = 0; n < f.nk && !f.oom; n++) {
    kout *k = &f.k[n];
    memset(fn_seen, 0, (f.nf + 1) * sizeof *fn_seen);
    for (size_t c = 0; c < f.nc; c++) c_seen[c] = c_global[c];
    bool sync = global_sync;
    reach(&f, k->def, fn_seen, c_seen, &sync);
    uint32_t bmask = 0, tmask = 0;
    for (int i = 0; i < k->np; i++) {
      if (k->p[i].fc >= 0) c_seen[k->p[i].fc] = true;
      if (k->p[i].kind == P_BUFFER) bmask |= 1u << k->p[i].index;
      if (k->p[i].kind == P_TG) tmask |= 1u << k->p[i].index;
    }
    sm__text_printf(&argbufs, "  case %zu: return sm_argbuf_%zu(sm_index_);\n", n, n);
    buf tr = {0};
    emit_trampoline(&f, n, &tr, c_seen, sync);
    /* argument buffers: the layout of each buffer's struct (where the kernel's name is valid) */
    sm__text_printf(
        &tr,
        " extern \"C\" const sm_argbuf_layout *sm_argbuf_%zu(unsigned sm_index_) { " SM_GUARD_OPEN
        "%zu*/",
        n, n);
    for (int i = 0; i < k->np; i++)
      if (k->p[i].kind == P_BUFFER)
        sm__text_printf(
            &tr,
            " if (sm_index_ == %du) return ::sm::argbuf_of<::sm::param_t<decltype(&%s), %d>>();",
            k->p[i].index, k->callee, i);
    put_s(&tr, " " SM_GUARD_CLOSE " (void)sm_index_; return nullptr; }");
    if (tr.oom) f.oom = true;
    add_edit(&f, k->insert_at, k->insert_at, tr.p ? tr.p : "");
    free(tr.p);
    sm__text_printf(&table, "static const uint32_t sm_fc_used_%zu[] = {0u", n);
    int used = 0;
    for (size_t c = 0; c < f.nc; c++)
      if (c_seen[c] && f.c[c].index >= 0) sm__text_printf(&table, ", %zuu", c), used++;
    sm__text_printf(&table, "};\nstatic const uint32_t sm_fc_conds_%zu[] = {0u", n);
    int conds = 0;
    for (int i = 0; i < k->np; i++)
      if (k->p[i].fc >= 0 && (k->p[i].kind == P_BUFFER || k->p[i].kind == P_TG)) {
        sm__text_printf(&table, ", %du, %du, %du", k->p[i].kind == P_TG, k->p[i].index, k->p[i].fc);
        conds++;
      }
    put_s(&table, "};\n");
    /* threadgroup variables it can reach: in what it reaches, or anywhere else */
    sm__text_printf(&table, "static const uint32_t sm_tg_%zu[] = {0u", n);
    int ntg = 0;
    for (uint32_t v = 0; v < f.tg_ids && tg_owner; v++) {
      long g = tg_owner[v];
      if (g < 0 || fn_seen[g] || fn_global[g]) sm__text_printf(&table, ", %uu", v), ntg++;
    }
    put_s(&table, "};\n");
    sm__text_printf(&tg_table, "  {sm_tg_%zu + 1, %du},\n", n, ntg);
    /* the same, for the library before any code is generated */
    /* first number: needs fibers (bit 0), the features it uses (bits 1..) */
    sm__text_printf(&manifest, "K %u %u %u %d",
                    (sync ? 1u : 0u) | features_of(&f, fn_seen, fn_global) << 1, bmask, tmask,
                    used);
    for (size_t c = 0; c < f.nc; c++)
      if (c_seen[c] && f.c[c].index >= 0) sm__text_printf(&manifest, " %zu", c);
    sm__text_printf(&manifest, " %d", conds);
    for (int i = 0; i < k->np; i++)
      if (k->p[i].fc >= 0 && (k->p[i].kind == P_BUFFER || k->p[i].kind == P_TG))
        sm__text_printf(&manifest, " %d %d %d", k->p[i].kind == P_TG, k->p[i].index, k->p[i].fc);
    sm__text_printf(&manifest, " %s\n", k->host);
    /* G c guard: constant c is used only where guard holds */
    if (need.always && need.guards) {
      for (size_t c = 0; c < f.nc; c++) {
        need.always[c] = c_global[c];
        free(need.guards[c].p);
        memset(&need.guards[c], 0, sizeof need.guards[c]);
      }
      for (int i = 0; i < k->np; i++)
        if (k->p[i].fc >= 0) need.always[k->p[i].fc] = true;
      for (size_t g = 0; g < f.nf; g++) {
        need.plain[g] = false;
        free(need.last[g]);
        need.last[g] = NULL;
      }
      need_walk(&f, k->def, "", &need, 0);
      if (need.oom) f.oom = true;
      for (size_t c = 0; c < f.nc; c++)
        if (c_seen[c] && f.c[c].index >= 0 && !need.always[c] && need.guards[c].n)
          sm__text_printf(&manifest, "G %zu %s\n", c, need.guards[c].p);
    }
    sm__text_printf(
        &entries,
        "  {\"%s\", sm_tramp_%zu, %du, 0x%xu, 0x%xu, sm_written_%zu, sm_fc_used_%zu + 1, "
        "%du, %du, sm_fc_conds_%zu + 1, ",
        k->host, n, sync ? 1 : 0, bmask, tmask, n, n, used, conds, n);
    if (sync)
      put_s(&entries, "nullptr},\n");
    else
      sm__text_printf(&entries, "sm_group_%zu},\n", n);
  }
  for (size_t a = 0; a < f.nk; a++)
    for (size_t b2 = a + 1; b2 < f.nk; b2++)
      if (strcmp(f.k[a].host, f.k[b2].host) == 0)
        error_at(&f, f.k[b2].line, f.k[b2].col, "two kernels are named '%s'", f.k[a].host);
  sm__text_printf(&table,
                  "extern \"C\" const unsigned softmetal_abi_version = %uu;\n"
                  "extern \"C\" const unsigned softmetal_kernel_count = %zu;\n"
                  "extern \"C\" const sm_kernel_desc softmetal_kernels[] = {\n",
                  SM_ABI_VERSION, f.nk);
  sm__text_put(&table, entries.p ? entries.p : "", entries.n);
  put_s(&table, "  {}};\n");
  /* staticThreadgroupMemoryLength of kernel k */
  put_s(&table, "static const struct { const uint32_t *ids; uint32_t n; } sm_tg_of[] = {\n");
  sm__text_put(&table, tg_table.p ? tg_table.p : "", tg_table.n);
  sm__text_printf(
      &table,
      "  {}};\nextern \"C\" unsigned long long softmetal_tg_static_bytes(unsigned k) {\n"
      "  return k < %zuu ? ::sm::tg_bytes(sm_tg_of[k].ids, sm_tg_of[k].n) : 0;\n}\n",
      f.nk);
  if (tg_table.oom) f.oom = true;
  free(tg_table.p);
  put_s(&table, "extern \"C\" const sm_argbuf_layout *softmetal_argbuf(unsigned sm_kernel_, "
                "unsigned sm_index_) {\n"
                "  switch (sm_kernel_) {\n");
  sm__text_put(&table, argbufs.p ? argbufs.p : "", argbufs.n);
  put_s(&table, "  default: break;\n  }\n  (void)sm_index_;\n  return nullptr;\n}\n");
  if (argbufs.oom) f.oom = true;
  free(argbufs.p);
  sm__text_printf(&table,
                  "extern \"C\" const unsigned softmetal_constant_count = %zu;\n"
                  "extern \"C\" const sm_constant_desc softmetal_constants[] = {\n",
                  f.nc);
  for (size_t c = 0; c < f.nc; c++)
    sm__text_printf(&table, "  {\"%s\", %uu, %du, %du, %du},\n", f.c[c].name,
                    f.c[c].index < 0 ? UINT32_MAX : (unsigned)f.c[c].index,
                    f.c[c].mtl_type < 0 ? 0 : f.c[c].mtl_type, f.c[c].size,
                    f.c[c].optional ? 1 : 0);
  put_s(&table, "  {}};\n");
  for (size_t c = 0; c < f.nc; c++)
    sm__text_printf(&manifest, "C %u %d %d %d %s\n",
                    f.c[c].index < 0 ? UINT32_MAX : (unsigned)f.c[c].index,
                    f.c[c].mtl_type < 0 ? 0 : f.c[c].mtl_type, f.c[c].size, f.c[c].optional ? 1 : 0,
                    f.c[c].name);
  put_s(&table, SM_MANIFEST_BEGIN);
  sm__text_put(&table, manifest.p ? manifest.p : "", manifest.n);
  put_s(&table, SM_MANIFEST_END);
  if (manifest.oom) f.oom = true;
  free(manifest.p);
  /* Reads constant pos after loading values v/d on the calling thread. */
  sm__text_printf(
      &table, "%s",
      "extern \"C\" void softmetal_constant_value(const unsigned char *v, const unsigned "
      "char *d, unsigned pos, void *out) {\n  sm_thread t{}; t.fc_values = v; "
      "t.fc_defined = d; ::sm::fc_load(&t);\n  unsigned i = 0;\n  for (auto *r = "
      "::sm::fc_reg::head(); r; r = r->next, i++) if (i == pos) r->get(out);\n}\n");
  char *result = NULL;
  if (entries.oom) f.oom = true;
  free(entries.p);
  if (f.nerr || f.oom || table.oom) {
    if (f.oom || table.oom) put_s(&f.err, "softmetal: out of memory in the MSL front end\n");
    *err = f.err.p ? f.err.p : strdup("front end failed");
    f.err.p = NULL;
  } else {
    qsort(f.e, f.ne, sizeof *f.e, cmp_edit);
    size_t at = 0;
    for (size_t i = 0; i < f.ne; i++) {
      if (f.e[i].at < at) continue; /* overlaps an earlier rewrite */
      sm__text_put(&out, pp + at, f.e[i].at - at);
      sm__text_put(&out, f.e[i].text, strlen(f.e[i].text));
      at = f.e[i].end;
    }
    sm__text_put(&out, pp + at, len - at);
    sm__text_put(&out, table.p, table.n);
    if (out.oom) {
      *err = strdup("softmetal: out of memory in the MSL front end");
      free(out.p);
    } else {
      result = out.p;
    }
  }
  for (size_t i = 0; i < f.ne; i++) free(f.e[i].text);
  for (size_t i = 0; i < f.nk; i++)
    if (f.k[i].own_p) free(f.k[i].p);
  for (size_t i = 0; i < f.nf; i++) free(f.f[i].p);
  free(f.e);
  free(f.t);
  free(f.f);
  free(f.k);
  free(f.c);
  free(f.tg_at);
  free(tg_owner);
  free(f.err.p);
  free(fn_seen);
  for (size_t g = 0; g < f.nf; g++) {
    if (need.ifs) free(need.ifs[g]);
    if (need.last) free(need.last[g]);
  }
  for (size_t c = 0; c < f.nc && need.guards; c++) free(need.guards[c].p);
  free(need.ifs);
  free(need.nifs);
  free(need.found);
  free(need.plain);
  free(need.last);
  free(need.always);
  free(need.guards);
  free(c_seen);
  free(c_global);
  free(fn_global);
  free(covered);
  free(table.p);
  return result;
}

/* ------------------------------------------------- diagnostics quote the user's line */
/* Line n (1-based) of text: its start and length, or NULL. */
static const char *nth_line(const char *text, long n, size_t *len) {
  const char *p = text;
  for (long k = 1; k < n && p; k++) {
    p = strchr(p, '\n');
    if (p) p++;
  }
  if (!p || !*p) return NULL;
  const char *e = strchr(p, '\n');
  *len = e ? (size_t)(e - p) : strlen(p);
  return p;
}
static bool caret_line(const char *s, size_t n) {
  bool caret = false;
  size_t i = 0;
  /* clang 16 and later put a gutter before it: spaces, then "| " */
  while (i < n && s[i] == ' ') i++;
  if (i < n && s[i] == '|')
    i++;
  else
    i = 0;
  for (; i < n; i++) {
    if (s[i] == '^')
      caret = true;
    else if (s[i] != ' ' && s[i] != '~')
      return false;
  }
  return caret;
}

char *sm__front_quote(const char *diag, const char *source) {
  sm_text out = {0};
  const char *p = diag;
  size_t plen = strlen(SM_PROGRAM_SOURCE);
  while (*p) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    sm__text_put(&out, p, n);
    if (e) put_s(&out, "\n");
    const char *next = e ? e + 1 : p + n;
    long line = 0, col = 0;
    char *q = NULL;
    if (n > plen + 1 && strncmp(p, SM_PROGRAM_SOURCE ":", plen + 1) == 0) {
      line = strtol(p + plen + 1, &q, 10);
      if (q && *q == ':') col = strtol(q + 1, &q, 10);
    }
    size_t ulen = 0;
    const char *user = line > 0 && col > 0 && q && *q == ':' ? nth_line(source, line, &ulen) : NULL;
    if (user) {
      /* clang's excerpt of the translation unit (softmetal's rewrite of the
       * line) and its caret line: replaced by the user's line and a caret at
       * the column; the front end's own errors get them too */
      const char *e2 = strchr(next, '\n');
      const char *e3 = e2 ? strchr(e2 + 1, '\n') : NULL;
      if (e2 && caret_line(e2 + 1, e3 ? (size_t)(e3 - e2 - 1) : strlen(e2 + 1)))
        next = e3 ? e3 + 1 : e2 + 1 + strlen(e2 + 1);
      if (ulen && user[ulen - 1] == '\r') ulen--;
      sm__text_put(&out, user, ulen);
      put_s(&out, "\n");
      for (long k = 0; k + 1 < col; k++)
        put_s(&out, (size_t)k < ulen && user[k] == '\t' ? "\t" : " ");
      put_s(&out, "^\n");
    }
    p = next;
  }
  if (out.oom) {
    free(out.p);
    return NULL;
  }
  return out.p;
}
