/* SPDX-License-Identifier: MIT */
/* softmetal: threadgroup variables declared in function bodies. The front
 * end turns `threadgroup T v[N];` into a reference to sm_thread.tg_var(id):
 * one instance per threadgroup, poisoned (0xFF bytes, as threadgroup memory
 * bound with setThreadgroupMemoryLength:) when the threadgroup first reaches
 * the declaration. Storage never moves while the threadgroup runs. */
#include "sm_internal.h"

#include <stdlib.h>

enum { CHUNK = 64 * 1024 };

typedef struct chunk {
  struct chunk *next;
  size_t cap, used;
  _Alignas(64) unsigned char data[];
} chunk;

typedef struct {
  uint32_t gen; /* threadgroup in which p was handed out */
  void *p;
} slot;

struct sm_tg_arena {
  uint32_t gen;
  slot *slots;
  uint32_t nslots;
  chunk *first, *cur;
};

sm_tg_arena *sm__tg_arena_new(void) { return calloc(1, sizeof(sm_tg_arena)); }

void sm__tg_arena_begin(sm_tg_arena *a) {
  a->gen++;
  if (a->gen == 0) { /* wrapped: forget every slot */
    for (uint32_t i = 0; i < a->nslots; i++) a->slots[i].gen = 0;
    a->gen = 1;
  }
  for (chunk *c = a->first; c; c = c->next) c->used = 0;
  a->cur = a->first;
}

void sm__tg_arena_free(sm_tg_arena *a) {
  if (!a) return;
  for (chunk *c = a->first, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a->slots);
  free(a);
}

static void *carve(sm_tg_arena *a, size_t size, size_t align) {
  if (align < 16) align = 16;
  for (chunk *c = a->cur; c; c = c->next) {
    size_t at = (c->used + align - 1) & ~(align - 1);
    if (at <= c->cap && size <= c->cap - at) {
      c->used = at + size;
      a->cur = c;
      return c->data + at;
    }
  }
  size_t cap = size + align > CHUNK ? size + align : CHUNK;
  chunk *c = aligned_alloc(64, (sizeof(chunk) + cap + 63) & ~(size_t)63);
  if (!c) return NULL;
  c->cap = cap;
  c->used = 0;
  c->next = NULL;
  chunk **tail = &a->first;
  while (*tail) tail = &(*tail)->next;
  *tail = c;
  a->cur = c;
  size_t at = 0;
  c->used = at + size;
  return c->data + at;
}

void *sm__tg_var(struct sm_thread *t, uint32_t decl, uint32_t size, uint32_t align) {
  sm_tg_arena *a = t->tg_arena;
  if (decl >= a->nslots) {
    uint32_t n = decl + 16;
    slot *s = realloc(a->slots, (size_t)n * sizeof *s);
    if (!s) sm__fatal("softmetal: out of memory for threadgroup variable %u", decl);
    memset(s + a->nslots, 0, (size_t)(n - a->nslots) * sizeof *s);
    a->slots = s;
    a->nslots = n;
  }
  slot *s = &a->slots[decl];
  if (s->gen != a->gen) {
    s->p = carve(a, size, align);
    if (!s->p) sm__fatal("softmetal: out of memory for a threadgroup variable of %u bytes", size);
    memset(s->p, 0xFF, size);
    s->gen = a->gen;
  }
  return s->p;
}
