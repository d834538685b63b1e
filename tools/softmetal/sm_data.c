/* SPDX-License-Identifier: MIT */
/* libdispatch's data objects (dispatch_data_t), which carry a library
 * file to newLibraryWithData:error: (sm_archive.c). */
#include "sm_internal.h"

#include <stdlib.h>
#include <sys/mman.h>

/* dispatch_data_t: immutable bytes, a copy (DISPATCH_DATA_DESTRUCTOR_DEFAULT,
 * NULL) or the caller's, handed back when the object goes: with free()
 * (DISPATCH_DATA_DESTRUCTOR_FREE), munmap() (..._MUNMAP) or a destructor
 * block, which runs on the thread that releases the object (softmetal has no
 * dispatch queues; the queue argument is not used). */
static void data_destroy(sm_obj *o) {
  sm_dispatch_data *d = (sm_dispatch_data *)o;
  if (d->owner == 0 || d->owner == 1)
    free(d->bytes);
  else if (d->owner == 2)
    munmap(d->bytes, d->size);
  else if (d->owner == 3) {
    typedef struct {
      void *isa;
      int flags, reserved;
      void (*invoke)(void *);
    } blk;
    ((blk *)d->block)->invoke(d->block);
    sm__block_release(d->block);
  }
}
sm_class sm__dispatch_data_class = {"OS_dispatch_data", sizeof(sm_dispatch_data), data_destroy, Nil,
                                    0};

/* libdispatch's destructor constants (dispatch/data.h): blocks compared by address. */
static const struct {
  void *isa;
  int flags, reserved;
} g_free_tag, g_munmap_tag;
SM_EXPORT const void *const _dispatch_data_destructor_free;
SM_EXPORT const void *const _dispatch_data_destructor_munmap;
const void *const _dispatch_data_destructor_free = &g_free_tag;
const void *const _dispatch_data_destructor_munmap = &g_munmap_tag;

id dispatch_data_create(const void *buffer, size_t size, void *queue, void *destructor) {
  (void)queue;
  if (size > 0 && buffer == NULL)
    sm__fatal("dispatch_data_create: buffer = NULL with size = %zu", size);
  sm_dispatch_data *d = sm__new(&sm__dispatch_data_class);
  if (d == NULL) return nil;
  d->size = size;
  if (destructor == NULL) {
    d->bytes = malloc(size > 0 ? size : 1);
    if (d->bytes == NULL) {
      sm__release((id)d);
      return nil;
    }
    if (size > 0) memcpy(d->bytes, buffer, size);
    return (id)d;
  }
  d->bytes = (void *)buffer;
  if (destructor == &g_free_tag)
    d->owner = 1;
  else if (destructor == &g_munmap_tag)
    d->owner = 2;
  else {
    d->owner = 3;
    d->block = sm__block_copy(destructor);
  }
  return (id)d;
}

void sm__register_data(void) {
  sm__class_begin(&sm__dispatch_data_class);
  sm__class_end(&sm__dispatch_data_class);
}
