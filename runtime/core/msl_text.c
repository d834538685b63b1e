/* SPDX-License-Identifier: MIT */
/* Text helpers of the kernel API and the body-kernel generator: MSL
 * identifiers, a growing string, MSL type names and literals. */
#include "msl_text.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool cm__is_ident_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool cm__is_ident_char(char c) {
    return cm__is_ident_start(c) || (c >= '0' && c <= '9');
}
bool cm__is_identifier(const char *s) {
    if (s == NULL || !cm__is_ident_start(s[0]))
        return false;
    for (const char *p = s + 1; *p != '\0'; ++p)
        if (!cm__is_ident_char(*p))
            return false;
    return strlen(s) <= 255;
}

char *cm__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = cm__alloc(n, 1);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

void cm__text_put(cm__text *t, const char *s, size_t n) {
    if (t->failed)
        return;
    size_t need;
    if (cm__add_overflow_size(t->len, n + 1, &need)) {
        t->failed = true;
        return;
    }
    if (need > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *p = cm__alloc(cap, 1);
        if (p == NULL) {
            t->failed = true;
            return;
        }
        if (t->len > 0)
            memcpy(p, t->data, t->len);
        cm__free(t->data);
        t->data = p;
        t->cap = cap;
    }
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}

void cm__text_str(cm__text *t, const char *s) {
    cm__text_put(t, s, strlen(s));
}

void cm__text_fmt(cm__text *t, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        t->failed = true;
    else
        cm__text_put(t, buf, (size_t)n);
}

bool cm__uses_identifier(const char *text, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = strstr(text, name); p != NULL; p = strstr(p + 1, name)) {
        if (p > text && cm__is_ident_char(p[-1]))
            continue;
        if (cm__is_ident_char(p[n]))
            continue;
        return true;
    }
    return false;
}

const char *cm__msl_type(cm_dtype dt) {
    switch (dt) {
    case CM_BOOL: return "bool";
    case CM_INT8: return "char";
    case CM_INT16: return "short";
    case CM_INT32: return "int";
    case CM_INT64: return "long";
    case CM_UINT8: return "uchar";
    case CM_UINT16: return "ushort";
    case CM_UINT32: return "uint";
    case CM_UINT64: return "ulong";
    case CM_FLOAT16: return "half";
    case CM_BFLOAT16: return "bfloat";
    case CM_FLOAT32: return "float";
    default: return NULL;
    }
}

/* The MSL atomic type of an atomic output's dtype, or NULL. */
const char *cm__msl_atomic_type(cm_dtype dt) {
    switch (dt) {
    case CM_INT32: return "atomic_int";
    case CM_UINT32: return "atomic_uint";
    case CM_FLOAT32: return "atomic_float";
    default: return NULL;
    }
}

/* An MSL literal of one element of dt at p. */
void cm__msl_literal(cm__text *t, cm_dtype dt, const void *p) {
    double f = 0;
    switch (dt) {
    case CM_BOOL: cm__text_str(t, *(const uint8_t *)p ? "true" : "false"); return;
    case CM_INT8:
    case CM_INT16:
    case CM_INT32:
    case CM_INT64: {
        int64_t v = 0;
        cm__convert_element(CM_INT64, &v, dt, p);
        if (v == INT64_MIN)
            cm__text_str(t, "(-9223372036854775807L - 1)");
        else
            cm__text_fmt(t, "%" PRId64 "%s", v, dt == CM_INT64 ? "L" : "");
        return;
    }
    case CM_UINT8:
    case CM_UINT16:
    case CM_UINT32:
    case CM_UINT64: {
        uint64_t v = 0;
        cm__convert_element(CM_UINT64, &v, dt, p);
        cm__text_fmt(t, "%" PRIu64 "u%s", v, dt == CM_UINT64 ? "L" : "");
        return;
    }
    default:
        cm__convert_element(CM_FLOAT64, &f, dt, p);
        if (isnan(f))
            cm__text_fmt(t, "%s(NAN)", cm__msl_type(dt));
        else if (isinf(f))
            cm__text_fmt(t, "%s(%sINFINITY)", cm__msl_type(dt), f < 0 ? "-" : "");
        else /* 17 digits: exact for every float16, bfloat16 and float32 */
            cm__text_fmt(t, "%s(%.17ef)", cm__msl_type(dt), f);
        return;
    }
}
