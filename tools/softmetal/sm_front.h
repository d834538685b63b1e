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

/* MSL's `c ? h : f` with a half (or bfloat) and a float or integer operand is
 * ambiguous in C++, where half is a class. Given the translation unit and
 * the diagnostics of compiling it with -fdiagnostics-print-source-range-info,
 * returns the unit (malloc'd) with one operand of each such conditional cast
 * as MSL converts it (half and float: float; half and an integer: half), or
 * NULL when no diagnostic is of that kind. */
char *sm__front_fix_conditionals(const char *tu, const char *diag);

/* The diagnostics diag with each program_source:LINE:COL diagnostic quoting
 * the user's line LINE of source and a caret under column COL, in place of
 * clang's excerpt of the rewritten translation unit. Returns a malloc'd text,
 * or NULL when out of memory. */
char *sm__front_quote(const char *diag, const char *source);

#endif
