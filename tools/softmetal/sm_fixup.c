/* SPDX-License-Identifier: MIT */
/* The conditionals that C++ rejects where MSL converts (see sm_front.h,
 * sm__front_fix_conditionals). half is clang's _Float16 and needs no fix;
 * bfloat is a class that converts to and from every arithmetic type, so
 * `c ? b : f` is ambiguous in C++ where MSL applies the usual arithmetic
 * conversions (bfloat and float: float; bfloat and an integer: bfloat). The
 * compile that failed is repeated with -fdiagnostics-print-source-range-info;
 * each of its diagnostics
 *   FILE:L:C:{L1:C1-L2:C2}{L3:C3-L4:C4}: error: conditional expression is
 *   ambiguous; 'T1' [(aka 'A1')] can be converted to 'T2' [(aka 'A2')] and vice versa
 * gives the operands' ranges in the translation unit: its physical lines
 * (not the line markers' numbers, which L:C follows), byte columns, the end
 * exclusive. Nothing else is touched: a conditional this does not fix keeps
 * its diagnostic, which the second check reports. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_front.h"

enum { OP_OTHER, OP_BF16, OP_FLOAT, OP_INT };

static int operand_kind(const char *t, size_t n) {
  static const char *const quals[] = {"const ", "volatile "};
  for (bool again = true; again;) {
    again = false;
    for (size_t i = 0; i < 2; i++) {
      size_t q = strlen(quals[i]);
      if (n > q && strncmp(t, quals[i], q) == 0) t += q, n -= q, again = true;
    }
  }
  static const char *const bf16[] = {"bfloat", "metal::bfloat", "bfloat16_t"};
  static const char *const ints[] = {
      "bool", "char",         "signed char", "unsigned char", "short",     "unsigned short",
      "int",  "unsigned int", "long",        "unsigned long", "long long", "unsigned long long"};
  for (size_t i = 0; i < sizeof bf16 / sizeof *bf16; i++)
    if (strlen(bf16[i]) == n && strncmp(t, bf16[i], n) == 0) return OP_BF16;
  if ((n == 5 && strncmp(t, "float", 5) == 0) || (n == 6 && strncmp(t, "double", 6) == 0))
    return OP_FLOAT;
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
    if (strlen(ints[i]) == n && strncmp(t, ints[i], n) == 0) return OP_INT;
  return OP_OTHER;
}

/* Reads 'T' [(aka 'A')] at *s: the canonical spelling in *t, *n. */
static bool quoted_type(const char **s, const char **t, size_t *n) {
  if (**s != '\'') return false;
  const char *a = *s + 1, *e = strchr(a, '\'');
  if (!e) return false;
  *t = a, *n = (size_t)(e - a), *s = e + 1;
  if (strncmp(*s, " (aka '", 7) == 0) {
    a = *s + 7;
    e = strchr(a, '\'');
    if (!e || e[1] != ')') return false;
    *t = a, *n = (size_t)(e - a), *s = e + 2;
  }
  return true;
}

/* The offset in tu of column col (1-based, bytes) of its physical line line
 * (1-based); (size_t)-1 when there is none. */
static size_t tu_offset(const char *tu, long line, long col) {
  const char *p = tu;
  for (long l = 1; l < line; l++) {
    p = strchr(p, '\n');
    if (!p) return (size_t)-1;
    p++;
  }
  const char *eol = strchr(p, '\n');
  size_t len = eol ? (size_t)(eol - p) : strlen(p);
  if (col < 1 || (size_t)col > len + 1) return (size_t)-1;
  return (size_t)(p - tu) + (size_t)col - 1;
}

typedef struct {
  size_t at;
  const char *text; /* malloc'd, or close_paren */
} insertion;
static const char close_paren[] = ")";

typedef struct {
  insertion *ins;
  size_t n, cap;
  bool oom;
} insertions;

static int cmp_insertion(const void *a, const void *b) {
  const insertion *x = a, *y = b;
  return x->at < y->at ? -1 : x->at > y->at;
}

/* Wraps tu[a, b) in open ... ")", once (the same conditional appears once per
 * template instantiation). */
static void wrap(insertions *w, size_t a, size_t b, const char *open) {
  if (w->oom || a == (size_t)-1 || b == (size_t)-1 || b <= a) return;
  for (size_t i = 0; i < w->n; i += 2)
    if (w->ins[i].at == a && w->ins[i + 1].at == b && strcmp(w->ins[i].text, open) == 0) return;
  if (w->n + 2 > w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 32;
    if (cap > SIZE_MAX / sizeof *w->ins) {
      w->oom = true;
      return;
    }
    insertion *g = realloc(w->ins, cap * sizeof *g);
    if (!g) {
      w->oom = true;
      return;
    }
    w->ins = g, w->cap = cap;
  }
  char *o = strdup(open);
  if (!o) {
    w->oom = true;
    return;
  }
  w->ins[w->n++] = (insertion){a, o};
  w->ins[w->n++] = (insertion){b, close_paren};
}

/* Strips leading const/volatile from the type spelling t, n. */
static const char *unqualified(const char *t, size_t *n) {
  while (*n > 6 && (strncmp(t, "const ", 6) == 0 || strncmp(t, "volatile ", 9) == 0)) {
    size_t q = t[0] == 'c' ? 6 : 9;
    t += q, *n -= q;
  }
  return t;
}

char *sm__front_fix_conditionals(const char *tu, const char *diag) {
  static const char ambiguous[] = ": error: conditional expression is ambiguous; ";
  insertions w = {0};
  for (const char *line = diag; line && *line;
       line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
    const char *eol = strchr(line, '\n'), *hit = strstr(line, ambiguous);
    if (!hit || (eol && hit > eol)) continue;
    const char *colon = strchr(line, ':');
    long l[4], c[4], ql, qc;
    int used = 0;
    if (!colon ||
        sscanf(colon, ":%ld:%ld:{%ld:%ld-%ld:%ld}{%ld:%ld-%ld:%ld}%n", &ql, &qc, &l[0], &c[0],
               &l[1], &c[1], &l[2], &c[2], &l[3], &c[3], &used) != 10 ||
        colon + used != hit)
      continue;
    const char *s = hit + strlen(ambiguous), *t[2];
    size_t n[2];
    if (!quoted_type(&s, &t[0], &n[0]) || strncmp(s, " can be converted to ", 21) != 0) continue;
    s += 21;
    if (!quoted_type(&s, &t[1], &n[1]) || strncmp(s, " and vice versa", 15) != 0) continue;
    int k[2] = {operand_kind(t[0], n[0]), operand_kind(t[1], n[1])};
    size_t at[2], end[2];
    for (int i = 0; i < 2; i++) {
      at[i] = tu_offset(tu, l[2 * i], c[2 * i]);
      end[i] = tu_offset(tu, l[2 * i + 1], c[2 * i + 1]);
    }
    /* MSL: bfloat and float give float; bfloat and an integer give bfloat */
    if (k[0] == OP_BF16 && k[1] == OP_FLOAT)
      wrap(&w, at[0], end[0], "static_cast<float>(");
    else if (k[0] == OP_FLOAT && k[1] == OP_BF16)
      wrap(&w, at[1], end[1], "static_cast<float>(");
    else if ((k[0] == OP_BF16 && k[1] == OP_INT) || (k[0] == OP_INT && k[1] == OP_BF16)) {
      int f = k[0] == OP_BF16 ? 0 : 1; /* to the bfloat operand's type */
      size_t fn = n[f];
      const char *ft = unqualified(t[f], &fn);
      char open[64];
      snprintf(open, sizeof open, "static_cast<%.*s>(", (int)fn, ft);
      wrap(&w, at[1 - f], end[1 - f], open);
    }
  }
  char *out = NULL;
  if (!w.oom && w.n > 0) {
    qsort(w.ins, w.n, sizeof *w.ins, cmp_insertion); /* at one offset: all opens or all ")" */
    sm_text o = {0};
    size_t prev = 0;
    for (size_t i = 0; i < w.n; i++) {
      sm__text_put(&o, tu + prev, w.ins[i].at - prev);
      sm__text_put(&o, w.ins[i].text, strlen(w.ins[i].text));
      prev = w.ins[i].at;
    }
    sm__text_put(&o, tu + prev, strlen(tu + prev));
    if (o.oom)
      free(o.p);
    else
      out = o.p;
  }
  for (size_t i = 0; i < w.n; i++)
    if (w.ins[i].text != close_paren) free((char *)w.ins[i].text);
  free(w.ins);
  return out;
}
