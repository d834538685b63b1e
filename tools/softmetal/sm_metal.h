/* SPDX-License-Identifier: MIT */
/* softmetal's Metal objects as sm_metal.c (their behaviour) and sm_hazard.c
 * (Metal's validation of their use: the hazard checks) share them. Internal
 * to libsoftmetal. */
#ifndef SM_METAL_H
#define SM_METAL_H

#include "sm_front.h"
#include "sm_internal.h"

#include <pthread.h>

typedef struct {
  sm_obj hdr;
  id name;
  unsigned index; /* in MTLCopyAllDevices */
  atomic_ulong allocated;
} sm_device;

/* The hazard graph's nodes (sm_hazard.c). */
typedef struct sm_pass sm_pass;
typedef struct {
  sm_pass *pass; /* retained */
  bool write;
  char op[128];
} hz_access;

typedef struct {
  sm_pass **p;
  size_t n, cap;
} pass_vec;

typedef struct {
  sm_obj hdr;
  sm_device *device;           /* retained */
  unsigned char *mem;          /* the host's copy (contents); the only one unless Managed */
  unsigned char *gpu;          /* what blits and kernels use: mem, or a second copy if Managed */
  uint64_t gpu_address;        /* unmapped in this process: never a host pointer */
  NSUInteger length, reserved; /* reserved: bytes counted against the device */
  NSUInteger options, storage;
  bool nocopy;
  bool placed;       /* in a heap's memory: neither freed nor counted here */
  bool guarded;      /* MTL_SHADER_VALIDATION=1: mem and gpu from sm__guarded_alloc */
  bool untracked;    /* MTLResourceHazardTrackingModeUntracked */
  void *deallocator; /* copied block, or NULL */
  /* Passes of queue hz_queue that use it and may not be ordered before
   * later ones (untracked buffers only; under g_hz). */
  uint64_t hz_queue;
  hz_access *hz;
  size_t nhz, hz_cap;
} sm_buffer;

typedef struct {
  sm_obj hdr;
  sm_device *device;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t value;
} sm_event;

typedef struct {
  sm_obj hdr;
  sm_device *device; /* retained */
  sm_pass *updater;  /* the last pass that updated it, on queue queue_id (under g_hz) */
  uint64_t queue_id;
} sm_fence;

#define SM_MAX_USED 64u /* untracked buffers a compute encoder's useResource: calls name */
enum {
  CMD_COPY,
  CMD_FILL,
  CMD_SYNC,
  CMD_DISPATCH,
  CMD_SIGNAL,
  CMD_WAIT,
  CMD_UPDATE_FENCE,
  CMD_WAIT_FENCE,
  CMD_BARRIER /* a memory barrier in a concurrent compute pass */
};

typedef struct {
  sm_pipeline *pipeline;
  sm_buffer *buffers[SM_MAX_BINDINGS];
  NSUInteger offsets[SM_MAX_BINDINGS];
  void *bytes[SM_MAX_BINDINGS];
  NSUInteger tg_len[SM_MAX_BINDINGS];
  MTLSize grid, tg, groups;
  sm_buffer *indirect; /* threadgroups per grid, read at execution; or NULL */
  NSUInteger indirect_off;
  /* Untracked buffers made resident with useResource:usage: (argument
   * buffers): uses for the hazard checks. */
  sm_buffer *used[SM_MAX_USED];
  bool used_write[SM_MAX_USED];
  unsigned nused;
  /* In a concurrent pass: its number in the pass; and, set at execution,
   * whether another dispatch shares its segment (no barrier for all buffers
   * between them). Only then can it race: it runs tracked code, checked
   * against the dispatches since the last barrier (sm_hazard.c). */
  bool concurrent;
  bool shares_segment;
  unsigned number;
} dispatch_rec;

typedef struct {
  int kind;
  sm_buffer *src, *dst; /* retained when the command buffer retains references */
  NSUInteger src_off, dst_off, size;
  uint8_t fill;
  sm_event *event; /* retained */
  uint64_t value;
  dispatch_rec *dispatch;
  sm_fence *fence;              /* retained */
  sm_buffer **barrier;          /* CMD_BARRIER: the buffers it names (compared only), or NULL */
  size_t nbarrier;              /* for all buffers (MTLBarrierScopeBuffers) */
  int pass;                     /* encoder number in its command buffer, -1 for its own commands */
  const char *enc_sel, *op_sel; /* the encoder's creating selector; the command's */
} command;

typedef struct sm_queue sm_queue;
typedef struct sm_cmdbuf sm_cmdbuf;

struct sm_cmdbuf {
  sm_obj hdr;
  sm_queue *queue; /* retained */
  atomic_ulong status;
  bool retains_refs;
  command *cmds;
  size_t ncmds, cap;
  void **handlers;
  size_t nhandlers;
  id error;
  char *encode_error;   /* first encoding error, reported at execution */
  id active_encoder;    /* weak */
  uint64_t seq;         /* commit number on its queue */
  sm_cmdbuf *next;      /* queue list */
  uint64_t serial;      /* creation number, names it in messages */
  int npasses;          /* encoders made */
  sm_text enc_labels;   /* its encoders' labels, a line each */
  pass_vec passes;      /* its passes in the hazard graph (retained, under g_hz) */
  atomic_bool observed; /* the host saw it complete */
  /* Under the queue's core->mu: */
  bool holds_slot;       /* counts against the queue's maximum */
  bool waitable;         /* waitUntilCompleted may return */
  int waiting, returned; /* threads in waitUntilCompleted; those that left it */
};

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* work arrived */
  pthread_cond_t done_cv; /* a command buffer finished */
  sm_cmdbuf *head, *tail;
  uint64_t committed, finished; /* sequence numbers, in commit order */
  bool stop;
  bool busy;                  /* one of its command buffers is running (queue thread or a waiter) */
  NSUInteger max_uncompleted; /* commandBuffer blocks when this many are alive */
  NSUInteger uncompleted;     /* made and neither completed nor destroyed */
  pthread_cond_t slot_cv;     /* one of them completed */
  uint64_t rng;               /* completion-order coin, seeded (SOFTMETAL_SEED) */
} queue_core;

/* The last signal of an event on a queue, as a node of the hazard graph. */
typedef struct {
  sm_event *event; /* retained */
  uint64_t value;
  sm_pass *node; /* retained */
} queue_signal;

struct sm_queue {
  sm_obj hdr;
  sm_device *device;
  uint64_t id;
  queue_signal *signals; /* under g_hz */
  size_t nsignals;
  queue_core *core;
  bool started;
  pthread_t thread;
};

typedef struct {
  sm_obj hdr;
  sm_cmdbuf *cb; /* retained */
  bool ended;
  sm_pipeline *pipeline; /* retained */
  /* Bound buffers: retained when the command buffer retains references. */
  sm_buffer *buffers[SM_MAX_BINDINGS];
  NSUInteger offsets[SM_MAX_BINDINGS];
  void *bytes[SM_MAX_BINDINGS];
  NSUInteger bytes_len[SM_MAX_BINDINGS];
  NSUInteger tg_len[SM_MAX_BINDINGS];
  uint32_t tg_set; /* indices given a length (0 included) */
  int pass;        /* its number in the command buffer */
  const char *sel; /* the selector that made it */
  bool concurrent; /* MTLDispatchTypeConcurrent */
  unsigned ndispatch;
  /* Untracked buffers named by useResource:usage: (retained as bindings). */
  sm_buffer *used[SM_MAX_USED];
  bool used_write[SM_MAX_USED];
  unsigned nused;
} sm_encoder;

/* ------------------------------------------------------------- sm_hazard.c */
/* At commit: builds cb's passes in the hazard graph and checks them; false
 * with the message in err on a hazard (the caller fails the command
 * buffer: nothing of it runs). */
bool sm__hazard_commit(sm_cmdbuf *cb, char *err, size_t len);
/* The host saw cb complete: its passes are ordered before all later commits. */
void sm__hazard_observed(sm_cmdbuf *cb);
/* Concurrent passes, checked as their commands run (one per executing
 * command buffer; zeroed to start). */
typedef struct {
  int pass; /* the pass the records are of */
  struct hz_touch *t;
  size_t n, cap;
} sm_hz_run;
/* Dispatch command c of a concurrent pass ran and touched what t[0..n)
 * says: whether it races with a dispatch since the last barrier (false with
 * the message in err); records its ranges. */
bool sm__hazard_dispatched(sm_hz_run *s, const command *c, const struct sm_touched *t, unsigned n,
                           char *err, size_t len);
/* Barrier command c ran: forgets what it orders. */
void sm__hazard_barrier(sm_hz_run *s, const command *c);
void sm__hazard_run_free(sm_hz_run *s);
/* Their destructors drop what the hazard graph holds for them. */
void sm__hazard_buffer_gone(sm_buffer *b);
void sm__hazard_fence_gone(sm_fence *f);
void sm__hazard_cmdbuf_gone(sm_cmdbuf *cb);
void sm__hazard_queue_gone(sm_queue *q);

#endif
