/* SPDX-License-Identifier: MIT */
/* softmetal-bench: what softmetal's compile model costs and how fast it runs
 * kernels, each figure against a reference measured in the same run.
 *
 *   softmetal-bench                  both parts
 *   softmetal-bench compile [...]    softmetal_bench_compile.c
 *   softmetal-bench exec [...]       softmetal_bench_exec.c */
#include <stdio.h>
#include <string.h>

int sm_bench_compile_main(int argc, char **argv);
int sm_bench_exec_main(int argc, char **argv);

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "compile") == 0)
    return sm_bench_compile_main(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "exec") == 0) return sm_bench_exec_main(argc - 1, argv + 1);
  if (argc >= 2) {
    fprintf(stderr, "softmetal-bench: unknown part '%s' (expected compile or exec)\n", argv[1]);
    return 2;
  }
  char *none[] = {argv[0], NULL};
  int rc = sm_bench_compile_main(1, none);
  int rc2 = sm_bench_exec_main(1, none);
  return rc ? rc : rc2;
}
