/* SPDX-License-Identifier: MIT */
/* softmetal-metallib: writes softmetal's library container (see
 * sm_archive.c), the file that newLibraryWithData:error: and
 * cm_library_load load on softmetal, from MSL source. It stands where
 * `xcrun metal ... && xcrun metallib` stands on a Mac; the container holds
 * the source, which softmetal compiles when the library is loaded.
 *
 *   softmetal-metallib [--math safe|relaxed|fast] [--std MAJOR.MINOR]
 *                      [-D NAME[=VALUE]]... -o OUT.metallib IN.metal
 *
 * Math mode: safe by default, as cmetal's libraries (xcrun metal defaults to
 * fast math). Macros are defined before the source with `#line 1` after
 * them, so diagnostics keep the source's line numbers.
 *
 * The source is checked first, as newLibraryWithSource: checks it (through
 * libsoftmetal and its kernel cache): on a compile error the diagnostics go
 * to stderr, naming IN.metal:LINE:COL, no file is written and the exit
 * status is 1, as `xcrun metal` fails a build. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "softmetal.h"

static int usage(void) {
  fprintf(stderr, "usage: softmetal-metallib [--math safe|relaxed|fast] [--std MAJOR.MINOR] "
                  "[-D NAME[=VALUE]]... -o OUT.metallib IN.metal\n");
  return 2;
}

/* The usage after a bad argument; frees what main had. */
static int bad_usage(char *prefix) {
  free(prefix);
  return usage();
}

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

int main(int argc, char **argv) {
  const char *out = NULL, *in = NULL;
  uint32_t math = 0, version = 0;
  size_t prefix_len = 0;
  char *prefix = calloc(1, 1);
  for (int i = 1; i < argc; ++i) {
    const bool takes_value = strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--math") == 0 ||
                             strcmp(argv[i], "--std") == 0 || strcmp(argv[i], "-D") == 0;
    if (takes_value && i + 1 >= argc) {
      fprintf(stderr, "softmetal-metallib: %s needs a value\n", argv[i]);
      return bad_usage(prefix);
    }
    if (strcmp(argv[i], "-o") == 0) {
      out = argv[++i];
    } else if (strcmp(argv[i], "--math") == 0) {
      const char *m = argv[++i];
      if (strcmp(m, "safe") == 0)
        math = 0;
      else if (strcmp(m, "relaxed") == 0)
        math = 1;
      else if (strcmp(m, "fast") == 0)
        math = 2;
      else {
        fprintf(stderr, "softmetal-metallib: --math '%s': expected safe, relaxed or fast\n", m);
        return bad_usage(prefix);
      }
    } else if (strcmp(argv[i], "--std") == 0) {
      unsigned major = 0, minor = 0;
      char tail = 0;
      if (sscanf(argv[i + 1], "%u.%u%c", &major, &minor, &tail) != 2 || major > 0xffff ||
          minor > 0xffff) {
        fprintf(stderr, "softmetal-metallib: --std '%s': expected MAJOR.MINOR (3.1)\n",
                argv[i + 1]);
        return bad_usage(prefix);
      }
      ++i;
      version = (uint32_t)(major << 16) + minor;
    } else if (strncmp(argv[i], "-D", 2) == 0) {
      const char *def = argv[i][2] != '\0' ? argv[i] + 2 : argv[++i];
      if (strpbrk(def, "\r\n") != NULL) {
        fprintf(stderr, "softmetal-metallib: -D '%s': a macro is one line\n", def);
        return bad_usage(prefix);
      }
      const char *eq = strchr(def, '=');
      const size_t add = strlen(def) + 16;
      char *grown = realloc(prefix, prefix_len + add);
      if (grown == NULL) return 1;
      prefix = grown;
      prefix_len +=
          (size_t)(eq != NULL ? snprintf(prefix + prefix_len, add, "#define %.*s %s\n",
                                         (int)(eq - def), def, eq + 1)
                              : snprintf(prefix + prefix_len, add, "#define %s 1\n", def));
    } else if (argv[i][0] != '-' && in == NULL) {
      in = argv[i];
    } else {
      fprintf(stderr, "softmetal-metallib: %s argument '%s'\n",
              argv[i][0] == '-' ? "unknown" : "a second input", argv[i]);
      return bad_usage(prefix);
    }
  }
  if (out == NULL || in == NULL) {
    fprintf(stderr, "softmetal-metallib: %s\n", out == NULL ? "no -o OUT given" : "no input given");
    return bad_usage(prefix);
  }
  FILE *f = fopen(in, "rb");
  if (f == NULL) {
    fprintf(stderr, "softmetal-metallib: %s: %s\n", in, strerror(errno));
    return 1;
  }
  size_t cap = 1 << 16, len = 0;
  char *src = malloc(cap);
  for (size_t n; src != NULL && (n = fread(src + len, 1, cap - len, f)) > 0;) {
    len += n;
    if (len == cap) src = realloc(src, cap *= 2);
  }
  fclose(f);
  if (src == NULL) return 1;
  if (memchr(src, '\0', len) != NULL) {
    fprintf(stderr, "softmetal-metallib: %s has a NUL byte\n", in);
    return 1;
  }
  const char line1[] = "#line 1\n";
  const size_t body = prefix_len + (prefix_len ? sizeof line1 - 1 : 0) + len;
  char *text = malloc(body + 1);
  if (text == NULL) return 1;
  memcpy(text, prefix, prefix_len);
  if (prefix_len) memcpy(text + prefix_len, line1, sizeof line1 - 1);
  memcpy(text + body - len, src, len);
  text[body] = '\0';
  char *diag = NULL;
  const int checked = softmetal_check_source(text, (long)math, version, &diag);
  free(text);
  if (checked != 0) {
    /* program_source is the input file here */
    const char *d = diag != NULL ? diag : "?\n", *at;
    while ((at = strstr(d, "program_source")) != NULL) {
      fprintf(stderr, "%.*s%s", (int)(at - d), d, in);
      d = at + strlen("program_source");
    }
    fprintf(stderr, "%s%s", d, *d && d[strlen(d) - 1] == '\n' ? "" : "\n");
    fprintf(stderr, "softmetal-metallib: %s: %s\n", in,
            checked > 0 ? "compilation failed" : "cannot check the source");
    free(diag);
    free(src);
    free(prefix);
    return 1;
  }
  unsigned char head[32] = {'S', 'M', 'M', 'T', 'L', 'L', 'I', 'B'};
  put_u32(head + 8, 1);
  put_u32(head + 12, math);
  put_u32(head + 16, version);
  put_u32(head + 24, (uint32_t)body);
  put_u32(head + 28, (uint32_t)((uint64_t)body >> 32));
  FILE *o = fopen(out, "wb");
  if (o == NULL) {
    fprintf(stderr, "softmetal-metallib: %s: %s\n", out, strerror(errno));
    return 1;
  }
  int ok = fwrite(head, 1, sizeof head, o) == sizeof head &&
           fwrite(prefix, 1, prefix_len, o) == prefix_len &&
           (prefix_len == 0 || fwrite(line1, 1, sizeof line1 - 1, o) == sizeof line1 - 1) &&
           fwrite(src, 1, len, o) == len;
  ok = fclose(o) == 0 && ok;
  free(src);
  free(prefix);
  if (!ok) {
    fprintf(stderr, "softmetal-metallib: cannot write %s\n", out);
    return 1;
  }
  return 0;
}
