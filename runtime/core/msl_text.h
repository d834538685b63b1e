/* SPDX-License-Identifier: MIT */
/* Text helpers of the kernel API (kernel.c) and the body-kernel generator
 * (body_kernel.c): MSL identifiers, a growing string, MSL type names and
 * literals. msl_text.c; no state, thread-safe. */
#ifndef CMETAL_CORE_MSL_TEXT_H
#define CMETAL_CORE_MSL_TEXT_H

#include "backend.h"

#include <stdbool.h>
#include <stddef.h>

/* C identifier characters; an MSL identifier (C rules, at most 255 long). */
bool cm__is_ident_start(char c);
bool cm__is_ident_char(char c);
bool cm__is_identifier(const char *s);

/* A copy of s (cm__free it), or NULL when out of memory. */
char *cm__strdup(const char *s);

/* A growing string; on allocation failure `failed` is set and appends stop.
 * data is NUL-terminated once anything was appended; cm__free it. */
typedef struct cm__text {
    char *data;
    size_t len, cap;
    bool failed;
} cm__text;

void cm__text_put(cm__text *t, const char *s, size_t n);
void cm__text_str(cm__text *t, const char *s);
CM__PRINTF(2, 3) void cm__text_fmt(cm__text *t, const char *fmt, ...);

/* Whether `name` occurs in `text` as a whole identifier. */
bool cm__uses_identifier(const char *text, const char *name);

/* The MSL type of a dtype (NULL for none), and of its atomic. */
const char *cm__msl_type(cm_dtype dt);
const char *cm__msl_atomic_type(cm_dtype dt);

/* Appends the value at p, of dtype dt, as an MSL literal. */
void cm__msl_literal(cm__text *t, cm_dtype dt, const void *p);

#endif /* CMETAL_CORE_MSL_TEXT_H */
