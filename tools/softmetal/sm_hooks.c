/* SPDX-License-Identifier: MIT */
/* Calls up from lower layers. A file that must reach a file above it (the
 * root dealloc freeing a host record, NSError's userInfo, the compiler
 * restoring a binary archive's files, the command path telling the host
 * API) calls a hook here; the file above sets it when it registers, from
 * the library constructor (sm_load.c), before any object exists. Data only:
 * this file calls nothing. */
#include "sm_internal.h"

void (*sm__host_free_hook)(sm_obj *o);
id (*sm__dictionary_hook)(id *keys, id *values, size_t n);
bool (*sm__archive_restore_hook)(uint32_t kind, const unsigned char key[32], const char *path);
sm_host_hooks sm__host_hooks;
