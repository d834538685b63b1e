/* SPDX-License-Identifier: MIT */
/* softmetal's MSL front end: reads clang++ -E output of a Metal source,
 * finds the kernels and function constants of "program_source", rewrites
 * what C++ does not understand, and appends the kernel table. */
#ifndef SM_FRONT_H
#define SM_FRONT_H

#include <stdbool.h>
#include <stddef.h>

/* A growing NUL-terminated text; an allocation failure sets oom and makes
 * later appends no-ops. Zero-initialised means empty. */
typedef struct {
  char *p;
  size_t n, cap;
  bool oom;
} sm_text;

void sm__text_put(sm_text *b, const char *s, size_t n);
void sm__text_printf(sm_text *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The file name that line markers give the user's source. */
#define SM_PROGRAM_SOURCE "program_source"

/* Translates pp[0..len) (clang -E output with line markers; the user's
 * source was the file src_path) into the C++ translation unit to compile,
 * whose line markers name the user's source "program_source". Returns the new
 * text (malloc'd), or NULL with *err set (malloc'd) to diagnostics naming
 * program_source:LINE:COL. */
char *sm__front(const char *pp, size_t len, const char *src_path, char **err);

/* What the translation unit holds for the compile model (sm_compile.c):
 * - Guards: the code only kernel n needs (its explicit instantiation, its
 *   trampoline's call and its written-mask expression) is framed by the
 *   comments SM_GUARD_OPEN "n*" "/" and SM_GUARD_CLOSE; the compile of one
 *   function blanks the other kernels' guarded spans, so that their
 *   templates are not instantiated and no code is generated for them
 *   (non-template kernels are made inline for the same reason).
 * - A manifest, between SM_MANIFEST_BEGIN and SM_MANIFEST_END (in a
 *   comment), one line per kernel in table order:
 *     K needs_fibers buffer_mask threadgroup_mask n_used used... n_conds
 *       (kind index constant)... host_name
 *   then one per function constant in declaration order:
 *     C index type size optional name
 *   (decimal numbers; index 4294967295 for derived constants). */
#define SM_GUARD_OPEN "/*@sm{"
#define SM_GUARD_CLOSE "/*@sm}*/"
#define SM_MANIFEST_BEGIN "/*@sm-manifest\n"
#define SM_MANIFEST_END "@sm-manifest*/\n"

/* MSL's `c ? b : f` with a bfloat and a float or integer operand is
 * ambiguous in C++, where bfloat is a class (sm_fixup.c). Given the
 * translation unit and the diagnostics of compiling it with
 * -fdiagnostics-print-source-range-info, returns the unit (malloc'd) with one
 * operand of each such conditional cast as MSL converts it (bfloat and float:
 * float; bfloat and an integer: bfloat), or NULL when no diagnostic is of
 * that kind. */
char *sm__front_fix_conditionals(const char *tu, const char *diag);

/* The diagnostics diag with each program_source:LINE:COL diagnostic quoting
 * the user's line LINE of source and a caret under column COL, in place of
 * clang's excerpt of the rewritten translation unit. Returns a malloc'd text,
 * or NULL when out of memory. */
char *sm__front_quote(const char *diag, const char *source);

#endif
