/* SPDX-License-Identifier: MIT */
/* The op and dtype tables (runtime/core/op_table.h, CM__DTYPE_LIST of
 * runtime/core/convert.h) against the MSL sources of msl/, which keep
 * their own copies of the values: an op or a dtype added in one place
 * only fails here (the C side is held together by the build: a row
 * without a public value, or a value without a row, does not compile). */
#include "core/convert.h"
#include "core/op_table.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CMETAL_SOURCE_DIR
#error "the build defines CMETAL_SOURCE_DIR"
#endif

typedef struct row {
    const char *macro; /* the MSL macro: CM_UNARY_NEG */
    int value;
    cm__op_class cls;
} row;

#define ROW(K, NAME, name, CLASS) {#K #NAME, K##NAME, CLASS},
static const row unary_rows[] = {CM__UNARY_OPS(ROW, CM_UNARY_)};
static const row binary_rows[] = {CM__BINARY_OPS(ROW, CM_BINARY_)};
static const row reduce_rows[] = {CM__REDUCE_OPS(ROW, CM_REDUCE_)};
#undef ROW

typedef struct dtype_row {
    const char *macro;
    int value;
    int size;
    char dom;
    bool metal;
} dtype_row;

#define DROW(E, T, DOM, LD, KIND, SAT, MTL)                                                        \
    {#E, E, (int)sizeof(T), #DOM[0], strcmp(#MTL, "NONE") != 0},
static dtype_row dtype_rows[CM_DTYPE_COUNT];
static size_t ndtype_rows;
static void fill_dtype_rows(void) {
    const dtype_row rows[] = {CM__DTYPE_LIST(DROW)};
    memcpy(dtype_rows, rows, sizeof rows);
    ndtype_rows = sizeof rows / sizeof rows[0];
}
#undef DROW

static char *read_msl(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/msl/%s", CMETAL_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    cr_assert_not_null(text);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* Every "#define <prefix>X value" of the text must be a row with that
 * value, and every row must have one. */
static void check_defines(const char *file, const char *text, const char *prefix,
                          const char *const *macros, const int *values, size_t nrows) {
    bool seen[64] = {false};
    cr_assert(nrows <= 64);
    for (const char *p = strstr(text, "#define "); p != NULL; p = strstr(p + 1, "#define ")) {
        char name[64];
        long value;
        if (sscanf(p, "#define %63s %ld", name, &value) != 2 ||
            strncmp(name, prefix, strlen(prefix)) != 0)
            continue;
        size_t i = 0;
        while (i < nrows && strcmp(macros[i], name) != 0)
            ++i;
        cr_expect(i < nrows, "%s defines %s, which the table has not", file, name);
        if (i < nrows) {
            cr_expect_eq(value, values[i], "%s: %s is %ld, the table's is %d", file, name, value,
                         values[i]);
            seen[i] = true;
        }
    }
    for (size_t i = 0; i < nrows; ++i)
        cr_expect(seen[i], "%s has no #define %s of the table", file, macros[i]);
}

/* The body of MSL function `fn` (from its "{" to the matching "}"). */
static void body_of(const char *file, const char *text, const char *fn, const char **begin,
                    const char **end) {
    char head[128];
    snprintf(head, sizeof head, "%s(", fn);
    const char *p = strstr(text, head);
    cr_assert_not_null(p, "%s has no function %s", file, fn);
    p = strchr(p, '{');
    cr_assert_not_null(p);
    int depth = 0;
    const char *q = p;
    do {
        depth += *q == '{' ? 1 : *q == '}' ? -1 : 0;
        ++q;
    } while (depth > 0 && *q != '\0');
    *begin = p;
    *end = q;
}

/* What the "case <macro>:" of the function returns (the text up to ';'),
 * into out; false when the function has no such case. */
static bool case_returns(const char *begin, const char *end, const char *macro, char *out,
                         size_t cap) {
    char label[96];
    snprintf(label, sizeof label, "case %s:", macro);
    const char *p = strstr(begin, label);
    if (p == NULL || p >= end)
        return false;
    const char *r = strstr(p, "return ");
    if (r == NULL || r >= end)
        return true;
    r += strlen("return ");
    size_t n = 0;
    while (r[n] != ';' && r[n] != '\0' && n + 1 < cap)
        ++n;
    memcpy(out, r, n);
    out[n] = '\0';
    return true;
}

static void expect_case(const char *file, const char *text, const char *fn, const char *macro) {
    const char *b, *e;
    body_of(file, text, fn, &b, &e);
    char ret[128];
    cr_expect(case_returns(b, e, macro, ret, sizeof ret), "%s: %s has no case %s", file, fn, macro);
}

static void check_ops(const char *file, const char *text, const char *prefix, const row *rows,
                      size_t n) {
    const char *macros[64];
    int values[64];
    cr_assert(n <= 64);
    for (size_t i = 0; i < n; ++i) {
        macros[i] = rows[i].macro;
        values[i] = rows[i].value;
    }
    check_defines(file, text, prefix, macros, values, n);
}

Test(tables, unary_ops_in_msl) {
    char *text = read_msl("elementwise.metal");
    const size_t n = sizeof unary_rows / sizeof unary_rows[0];
    check_ops("elementwise.metal", text, "CM_UNARY_", unary_rows, n);
    for (size_t i = 0; i < n; ++i) {
        expect_case("elementwise.metal", text, "cm_unary_float", unary_rows[i].macro);
        if (unary_rows[i].cls == CM__UN_ANY)
            expect_case("elementwise.metal", text, "cm_unary_int", unary_rows[i].macro);
        else
            cr_expect_eq(unary_rows[i].cls, CM__UN_FLOAT, "%s: not a unary class",
                         unary_rows[i].macro);
    }
    free(text);
}

Test(tables, binary_ops_in_msl) {
    char *text = read_msl("elementwise.metal");
    const size_t n = sizeof binary_rows / sizeof binary_rows[0];
    check_ops("elementwise.metal", text, "CM_BINARY_", binary_rows, n);
    for (size_t i = 0; i < n; ++i) {
        const char *m = binary_rows[i].macro;
        const char *b, *e;
        body_of("elementwise.metal", text, "cm_binary_compares", &b, &e);
        char ret[128] = "";
        const bool listed = case_returns(b, e, m, ret, sizeof ret);
        switch (binary_rows[i].cls) {
        case CM__BIN_ARITH:
        case CM__BIN_ORDER:
            expect_case("elementwise.metal", text, "cm_binary_float", m);
            expect_case("elementwise.metal", text, "cm_binary_int", m);
            cr_expect(!listed, "cm_binary_compares lists %s, which does not compare", m);
            break;
        case CM__BIN_COMPARE:
            cr_expect(listed && strcmp(ret, "true") == 0,
                      "cm_binary_compares does not answer true for %s", m);
            body_of("elementwise.metal", text, "cm_compare", &b, &e);
            /* One case per domain: float, signed, unsigned. */
            int cases = 0;
            char label[96];
            snprintf(label, sizeof label, "case %s:", m);
            for (const char *p = strstr(b, label); p != NULL && p < e; p = strstr(p + 1, label))
                ++cases;
            cr_expect_eq(cases, 3, "cm_compare has %d cases of %s, not 3 (one per domain)", cases,
                         m);
            break;
        default: cr_expect_fail("%s: not a binary class", m);
        }
    }
    free(text);
}

Test(tables, reduce_ops_in_msl) {
    char *text = read_msl("reduce.metal");
    check_ops("reduce.metal", text, "CM_REDUCE_", reduce_rows,
              sizeof reduce_rows / sizeof reduce_rows[0]);
    free(text);
}

/* msl/common.h defines every dtype that has an MTLDataType in the table,
 * with its value, size and domain, and no other. */
Test(tables, dtypes_in_msl) {
    fill_dtype_rows();
    char *text = read_msl("common.h");
    cr_expect_eq(ndtype_rows, (size_t)CM_DTYPE_COUNT - 1, "CM__DTYPE_LIST has %zu rows",
                 ndtype_rows);
    /* The dtype macros are CM_ and a capital: leave out the other CM_ names. */
    for (const char *p = strstr(text, "#define CM_"); p != NULL; p = strstr(p + 1, "#define CM_")) {
        char name[64];
        long value;
        if (sscanf(p, "#define %63s %ld", name, &value) != 2)
            continue;
        bool known = strncmp(name, "CM_MAX_", 7) == 0 || strncmp(name, "CM_REDUCE_", 10) == 0 ||
                     strncmp(name, "CM_DOM_", 7) == 0;
        for (size_t i = 0; i < ndtype_rows && !known; ++i)
            known = strcmp(dtype_rows[i].macro, name) == 0;
        cr_expect(known, "common.h defines %s = %ld, a dtype the table has not", name, value);
    }
    const char *b, *e;
    for (size_t i = 0; i < ndtype_rows; ++i) {
        const dtype_row *d = &dtype_rows[i];
        char def[80];
        snprintf(def, sizeof def, "#define %s ", d->macro);
        const char *p = strstr(text, def);
        if (!d->metal) {
            cr_expect_null(p, "common.h defines %s, which has no MTLDataType in the table",
                           d->macro);
            continue;
        }
        cr_expect_not_null(p, "common.h has no #define %s", d->macro);
        if (p != NULL)
            cr_expect_eq(atoi(p + strlen(def)), d->value, "common.h: %s is not %d", d->macro,
                         d->value);
        char ret[128];
        body_of("common.h", text, "cm_dtype_size", &b, &e);
        bool has = case_returns(b, e, d->macro, ret, sizeof ret);
        cr_expect(has, "cm_dtype_size has no case %s", d->macro);
        if (has)
            cr_expect_eq(atoi(ret), d->size, "cm_dtype_size(%s) is %s, the table's %d", d->macro,
                         ret, d->size);
        body_of("common.h", text, "cm_domain", &b, &e);
        char want[16];
        snprintf(want, sizeof want, "CM_DOM_%c", d->dom);
        has = case_returns(b, e, d->macro, ret, sizeof ret);
        cr_expect(has, "cm_domain has no case %s", d->macro);
        if (has)
            cr_expect_str_eq(ret, want, "cm_domain(%s) is %s, the table's %s", d->macro, ret, want);
    }
    free(text);
}
