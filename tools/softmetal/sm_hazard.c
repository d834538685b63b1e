/* SPDX-License-Identifier: MIT */
/* softmetal's hazard checks: Metal's validation of how passes use buffers,
 * not Metal's behaviour (see tools/softmetal/README.md, Strictness).
 * Untracked buffers between passes (the hazard graph, checked at commit) and
 * dispatches of a concurrent compute pass (checked as they run, by the byte
 * ranges each dispatch actually touched). */
#include "sm_metal.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------- hazard graph */
/* Untracked resources get no ordering from Metal between passes (encoders).
 * softmetal checks, when a command buffer is committed, that every pass that
 * touches an untracked buffer another pass of the same queue wrote (or writes
 * what another read) is ordered after it: by fences (updateFence: at the end
 * of a pass, waitForFence: at the start of a later one), by a shared event
 * signalled and waited for on the queue, or because the host saw the earlier
 * command buffer complete (waitUntilCompleted returned, or status read as
 * Completed or Error) before the commit. Granularity: whole buffers, as
 * Metal's own tracking. Every field below is under g_hz. */
struct sm_pass {
  long rc;
  uint64_t seq;    /* analysis order: predecessors have smaller ones */
  uint64_t mark;   /* search stamp */
  bool done;       /* finished before anything analysed from now on */
  sm_pass **preds; /* retained */
  size_t npreds, cap;
  char what[160];
};

static pthread_mutex_t g_hz = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_hz_seq, g_hz_mark;

static void pv_push(pass_vec *v, sm_pass *p) {
  if (v->n == v->cap) {
    if (!sm__grow(&v->p, &v->cap, sizeof *v->p, 8)) sm__fatal("hazard tracking: out of memory");
  }
  v->p[v->n++] = p;
}

static sm_pass *pass_new(const char *what) {
  sm_pass *p = calloc(1, sizeof *p);
  if (!p) sm__fatal("hazard tracking: out of memory");
  p->rc = 1;
  p->seq = ++g_hz_seq;
  snprintf(p->what, sizeof p->what, "%s", what);
  return p;
}

static sm_pass *pass_ref(sm_pass *p) {
  p->rc++;
  return p;
}

static void pass_unref(sm_pass *p) {
  pass_vec stack = {0};
  while (p) {
    if (--p->rc == 0) {
      for (size_t i = 0; i < p->npreds; i++) pv_push(&stack, p->preds[i]);
      free(p->preds);
      free(p);
    }
    p = stack.n ? stack.p[--stack.n] : NULL;
  }
  free(stack.p);
}

/* Adds an edge pred -> p (pred ordered before p). */
static void pass_after_edge(sm_pass *p, sm_pass *pred) {
  pass_vec v = {p->preds, p->npreds, p->cap};
  pv_push(&v, pass_ref(pred));
  p->preds = v.p;
  p->npreds = v.n;
  p->cap = v.cap;
}

/* p has completed, so has every pass ordered before it: mark them and drop
 * the edges, which nothing needs any more. */
static void pass_done(sm_pass *p) {
  pass_vec stack = {0};
  for (sm_pass *q = p; q; q = stack.n ? stack.p[--stack.n] : NULL) {
    if (!q->done) {
      q->done = true;
      for (size_t i = 0; i < q->npreds; i++) pv_push(&stack, q->preds[i]);
      free(q->preds);
      q->preds = NULL;
      q->npreds = q->cap = 0;
    }
    if (q != p) pass_unref(q); /* the reference the edge held */
  }
  free(stack.p);
}

/* Whether w is ordered before p. */
static bool pass_ordered(sm_pass *w, sm_pass *p) {
  if (w->done) return true;
  uint64_t mark = ++g_hz_mark;
  pass_vec stack = {0};
  bool found = false;
  for (sm_pass *q = p; q && !found; q = stack.n ? stack.p[--stack.n] : NULL) {
    if (q == w) found = true;
    if (q->mark == mark) continue;
    q->mark = mark;
    for (size_t i = 0; i < q->npreds; i++)
      if (q->preds[i]->seq >= w->seq && q->preds[i]->mark != mark) pv_push(&stack, q->preds[i]);
  }
  free(stack.p);
  return found;
}

static void buffer_forget_passes(sm_buffer *b) {
  for (size_t i = 0; i < b->nhz; i++) pass_unref(b->hz[i].pass);
  b->nhz = 0;
}

void sm__hazard_buffer_gone(sm_buffer *b) {
  pthread_mutex_lock(&g_hz);
  buffer_forget_passes(b);
  pthread_mutex_unlock(&g_hz);
  free(b->hz);
}

void sm__hazard_fence_gone(sm_fence *f) {
  pthread_mutex_lock(&g_hz);
  if (f->updater) pass_unref(f->updater);
  pthread_mutex_unlock(&g_hz);
}

void sm__hazard_cmdbuf_gone(sm_cmdbuf *cb) {
  pthread_mutex_lock(&g_hz);
  for (size_t i = 0; i < cb->passes.n; i++) pass_unref(cb->passes.p[i]);
  pthread_mutex_unlock(&g_hz);
  free(cb->passes.p);
}

void sm__hazard_queue_gone(sm_queue *q) {
  pthread_mutex_lock(&g_hz);
  for (size_t i = 0; i < q->nsignals; i++) pass_unref(q->signals[i].node);
  pthread_mutex_unlock(&g_hz);
  for (size_t i = 0; i < q->nsignals; i++) sm__release((id)q->signals[i].event);
  free(q->signals);
}

/* ------------------------------------------------------------- commit check */
typedef struct {
  sm_buffer *buf;
  bool write;
} hz_use;

/* The command's description in hazard messages, written only where one
 * needs it (the command's untracked buffers). */
static void command_op(const command *c, char *out, size_t len) {
  if (c->kind == CMD_DISPATCH)
    snprintf(out, len, "%s, kernel %s", c->op_sel, c->dispatch->pipeline->desc->name);
  else
    snprintf(out, len, "%s", c->op_sel);
}

/* The buffers command c uses, with whether it may write them. */
static size_t command_uses(const command *c, hz_use *u) {
  size_t n = 0;
  switch (c->kind) {
  case CMD_COPY:
    u[n++] = (hz_use){c->src, false};
    u[n++] = (hz_use){c->dst, true};
    break;
  case CMD_FILL: u[n++] = (hz_use){c->dst, true}; break;
  case CMD_SYNC: u[n++] = (hz_use){c->dst, false}; break;
  case CMD_DISPATCH: {
    const dispatch_rec *d = c->dispatch;
    const struct sm_kernel_desc *k = d->pipeline->desc;
    for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
      if (!(k->buffer_mask >> i & 1u) || !d->buffers[i]) continue;
      bool write = k->written_mask >> i & 1u;
      size_t j = 0;
      while (j < n && u[j].buf != d->buffers[i]) j++;
      if (j == n)
        u[n++] = (hz_use){d->buffers[i], write};
      else
        u[j].write |= write;
    }
    if (d->indirect) {
      size_t j = 0;
      while (j < n && u[j].buf != d->indirect) j++;
      if (j == n) u[n++] = (hz_use){d->indirect, false};
    }
    for (unsigned i = 0; i < d->nused; i++) {
      size_t j = 0;
      while (j < n && u[j].buf != d->used[i]) j++;
      if (j == n)
        u[n++] = (hz_use){d->used[i], d->used_write[i]};
      else
        u[j].write |= d->used_write[i];
    }
    return n;
  }
  default: return 0;
  }
  return n;
}

static void buffer_name(const sm_buffer *b, char *out, size_t len) {
  const char *label = sm__string_utf8(b->hdr.label);
  if (label)
    snprintf(out, len, "'%s'", label);
  else
    snprintf(out, len, "%p (length %lu)", (const void *)b, b->length);
}

/* Checks the untracked-buffer accesses of pass p (commands [a, z) of cb) against
 * the passes before it, then records them. False, with err, on a hazard. */
static bool pass_check(sm_cmdbuf *cb, sm_pass *p, size_t a, size_t z, char *err, size_t len) {
  uint64_t qid = cb->queue->id;
  for (size_t i = a; i < z; i++) {
    hz_use uses[SM_MAX_BINDINGS + 1 + SM_MAX_USED];
    size_t n = command_uses(&cb->cmds[i], uses);
    for (size_t u = 0; u < n; u++) {
      sm_buffer *b = uses[u].buf;
      if (!b->untracked) continue;
      if (b->hz_queue != qid) { /* other queues are not checked */
        buffer_forget_passes(b);
        b->hz_queue = qid;
      }
      hz_access *mine = NULL;
      size_t keep = 0;
      for (size_t r = 0; r < b->nhz; r++) {
        hz_access *h = &b->hz[r];
        if (h->pass == p) {
          mine = h;
        } else if ((h->write || uses[u].write) && !pass_ordered(h->pass, p)) {
          char name[96], op[128];
          buffer_name(b, name, sizeof name);
          command_op(&cb->cmds[i], op, sizeof op);
          snprintf(err, len,
                   "untracked buffer hazard: %s (%s) %s buffer %s, which %s (%s) %s, and "
                   "nothing orders the two passes: buffers with "
                   "MTLResourceHazardTrackingModeUntracked get no ordering between passes; "
                   "use an MTLFence (updateFence: in the first pass, waitForFence: in the "
                   "second), a shared event, or wait for the first command buffer to "
                   "complete before committing the second",
                   p->what, op, uses[u].write ? "writes" : "reads", name, h->pass->what, h->op,
                   h->write ? "wrote" : "read");
          return false;
        } else if (uses[u].write || h->pass->done) {
          pass_unref(h->pass); /* ordered before p's write, or finished */
          continue;
        }
        b->hz[keep++] = *h;
        if (h->pass == p) mine = &b->hz[keep - 1];
      }
      b->nhz = keep;
      if (mine) {
        mine->write |= uses[u].write;
        continue;
      }
      if (b->nhz == b->hz_cap) {
        if (!sm__grow(&b->hz, &b->hz_cap, sizeof *b->hz, 4))
          sm__fatal("hazard tracking: out of memory");
      }
      hz_access *h = &b->hz[b->nhz++];
      h->pass = pass_ref(p);
      h->write = uses[u].write;
      command_op(&cb->cmds[i], h->op, sizeof h->op);
    }
  }
  return true;
}

static queue_signal *queue_signal_of(sm_queue *q, const sm_event *e) {
  for (size_t i = 0; i < q->nsignals; i++)
    if (q->signals[i].event == e) return &q->signals[i];
  return NULL;
}

bool sm__hazard_commit(sm_cmdbuf *cb, char *err, size_t len) {
  sm_queue *q = cb->queue;
  char cbname[96], what[160];
  err[0] = 0;
  const char *label = sm__string_utf8(cb->hdr.label);
  if (label)
    snprintf(cbname, sizeof cbname, "'%s'", label);
  else
    snprintf(cbname, sizeof cbname, "#%lu", (unsigned long)cb->serial);
  pthread_mutex_lock(&g_hz);
  pass_vec after_waits = {0}; /* signal nodes that event waits so far order us after */
  for (size_t i = 0; i < cb->ncmds && !err[0];) {
    command *c = &cb->cmds[i];
    if (c->pass < 0) { /* the command buffer's own event commands */
      if (c->kind == CMD_SIGNAL) {
        snprintf(what, sizeof what, "encodeSignalEvent:value: %lu of command buffer %s",
                 (unsigned long)c->value, cbname);
        sm_pass *node = pass_new(what);
        for (size_t k = 0; k < cb->passes.n; k++) pass_after_edge(node, cb->passes.p[k]);
        for (size_t k = 0; k < after_waits.n; k++) pass_after_edge(node, after_waits.p[k]);
        queue_signal *sig = queue_signal_of(q, c->event);
        if (!sig) {
          queue_signal *grown = realloc(q->signals, (q->nsignals + 1) * sizeof *grown);
          if (!grown) sm__fatal("hazard tracking: out of memory");
          q->signals = grown;
          sig = &q->signals[q->nsignals++];
          sig->event = (sm_event *)sm__retain((id)c->event);
        } else {
          pass_unref(sig->node);
        }
        sig->node = node;
        sig->value = c->value;
      } else if (c->kind == CMD_WAIT) {
        queue_signal *sig = queue_signal_of(q, c->event);
        if (sig && sig->value >= c->value) pv_push(&after_waits, pass_ref(sig->node));
      }
      i++;
      continue;
    }
    size_t z = i;
    while (z < cb->ncmds && cb->cmds[z].pass == c->pass) z++;
    snprintf(what, sizeof what, "%s pass %d of command buffer %s", c->enc_sel, c->pass + 1, cbname);
    sm_pass *p = pass_new(what);
    pv_push(&cb->passes, p);
    for (size_t k = 0; k < after_waits.n; k++) pass_after_edge(p, after_waits.p[k]);
    for (size_t k = i; k < z; k++) /* fences are waited for at the start of the pass */
      if (cb->cmds[k].kind == CMD_WAIT_FENCE && cb->cmds[k].fence->updater &&
          cb->cmds[k].fence->queue_id == q->id)
        pass_after_edge(p, cb->cmds[k].fence->updater);
    if (!pass_check(cb, p, i, z, err, len)) break;
    for (size_t k = i; k < z; k++) { /* and updated at its end */
      sm_fence *f = cb->cmds[k].fence;
      if (cb->cmds[k].kind != CMD_UPDATE_FENCE) continue;
      if (f->updater) pass_unref(f->updater);
      f->updater = pass_ref(p);
      f->queue_id = q->id;
    }
    i = z;
  }
  if (err[0]) /* never runs, so it orders nothing and races with nothing */
    for (size_t k = 0; k < cb->passes.n; k++) cb->passes.p[k]->done = true;
  for (size_t k = 0; k < after_waits.n; k++) pass_unref(after_waits.p[k]);
  free(after_waits.p);
  pthread_mutex_unlock(&g_hz);
  return !err[0];
}

void sm__hazard_observed(sm_cmdbuf *cb) {
  if (atomic_exchange(&cb->observed, true)) return;
  pthread_mutex_lock(&g_hz);
  for (size_t k = 0; k < cb->passes.n; k++) pass_done(cb->passes.p[k]);
  pthread_mutex_unlock(&g_hz);
}

/* ------------------------------------------------------------- concurrent passes */
/* In a concurrent pass, a dispatch that touches bytes an earlier dispatch
 * since the last barrier wrote (or writes bytes it read) races with it.
 * The bytes are those each dispatch actually touched: a dispatch that
 * shares its segment with another (mark_segments in sm_metal.c; one alone
 * cannot race) runs its kernel's tracked code, which reports every
 * memory access (sm_exec.c records, per binding, the lowest and highest
 * address read and written from the binding's offset up to the next
 * binding's offset in the same buffer). So one buffer holding many tensors
 * at disjoint ranges (ggml) never conflicts, and bindings at different
 * offsets whose bytes overlap do. Metal reports none of these races. */
struct hz_touch {
  const void *buf;
  uintptr_t lo, hi; /* byte offsets in buf */
  bool write;
  unsigned dispatch;
  const char *kernel;
};

static const struct hz_touch *touch_conflict(const sm_hz_run *s, const struct hz_touch *t) {
  for (size_t i = 0; i < s->n; i++) {
    const struct hz_touch *o = &s->t[i];
    if (o->buf == t->buf && (o->write || t->write) && o->lo < t->hi && t->lo < o->hi) return o;
  }
  return NULL;
}

static void touch_push(sm_hz_run *s, struct hz_touch t) {
  if (s->n == s->cap) {
    if (!sm__grow(&s->t, &s->cap, sizeof *s->t, 8)) sm__fatal("hazard tracking: out of memory");
  }
  s->t[s->n++] = t;
}

bool sm__hazard_dispatched(sm_hz_run *s, const command *c, const struct sm_touched *t, unsigned n,
                           char *err, size_t len) {
  const dispatch_rec *r = c->dispatch;
  if (s->pass != c->pass) {
    s->pass = c->pass;
    s->n = 0;
  }
  size_t before = s->n; /* its own ranges never conflict with each other */
  for (unsigned i = 0; i < n; i++) {
    const sm_buffer *b = t[i].owner;
    uintptr_t base = (uintptr_t)b->gpu;
    struct hz_touch mine[2] = {
        {b, t[i].wlo - base, t[i].whi - base, true, r->number, r->pipeline->desc->name},
        {b, t[i].rlo - base, t[i].rhi - base, false, r->number, r->pipeline->desc->name}};
    bool touched[2] = {t[i].wlo < t[i].whi, t[i].rlo < t[i].rhi};
    for (int k = 0; k < 2; k++) {
      if (!touched[k]) continue;
      sm_hz_run earlier = {s->pass, s->t, before, before};
      const struct hz_touch *o = touch_conflict(&earlier, &mine[k]);
      if (o) {
        char name[96];
        buffer_name(b, name, sizeof name);
        snprintf(err, len,
                 "concurrent dispatch hazard: in a computeCommandEncoderWithDispatchType: "
                 "(MTLDispatchTypeConcurrent) pass, %s dispatch %u (kernel %s) %s buffer %s at "
                 "bytes [%lu, %lu), which dispatch %u (kernel %s) %s at bytes [%lu, %lu): they "
                 "overlap at [%lu, %lu), with no memoryBarrierWithScope: (MTLBarrierScopeBuffers) "
                 "or memoryBarrierWithResources:count: between them; concurrent dispatches are "
                 "not ordered, tracked buffers or not",
                 c->op_sel, r->number, mine[k].kernel, mine[k].write ? "writes" : "reads", name,
                 (unsigned long)mine[k].lo, (unsigned long)mine[k].hi, o->dispatch, o->kernel,
                 o->write ? "writes" : "reads", (unsigned long)o->lo, (unsigned long)o->hi,
                 (unsigned long)(o->lo > mine[k].lo ? o->lo : mine[k].lo),
                 (unsigned long)(o->hi < mine[k].hi ? o->hi : mine[k].hi));
        return false;
      }
      touch_push(s, mine[k]);
    }
  }
  return true;
}

void sm__hazard_barrier(sm_hz_run *s, const command *c) {
  if (s->pass != c->pass) {
    s->pass = c->pass;
    s->n = 0;
  }
  if (!c->barrier) {
    s->n = 0;
    return;
  }
  size_t keep = 0;
  for (size_t i = 0; i < s->n; i++) {
    bool named = false;
    for (size_t k = 0; k < c->nbarrier && !named; k++) named = s->t[i].buf == c->barrier[k];
    if (!named) s->t[keep++] = s->t[i];
  }
  s->n = keep;
}

void sm__hazard_run_free(sm_hz_run *s) {
  free(s->t);
  s->t = NULL;
  s->n = s->cap = 0;
}
