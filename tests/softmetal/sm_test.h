/* SPDX-License-Identifier: MIT */
/* Test helpers for softmetal: messages through objc_msg_lookup with exact
 * prototypes, and clang-ABI block literals built by hand. */
#ifndef SM_TEST_H
#define SM_TEST_H

#include <criterion/criterion.h>
#include <objc/runtime.h>
#include <objc/message.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "softmetal.h"

typedef unsigned long NSUInteger;
typedef long NSInteger;
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
typedef struct {
  NSUInteger location, length;
} NSRange;

id MTLCreateSystemDefaultDevice(void);
id MTLCopyAllDevices(void);
void *objc_autoreleasePoolPush(void);
void objc_autoreleasePoolPop(void *token);

/* SEND(return type, (id, SEL, argument types...), receiver, "selector", args...) */
#define SEND(R, PROTO, obj, sel, ...)                                                              \
  ((R(*) PROTO)(void (*)(void))objc_msg_lookup((obj), sel_registerName(sel)))(                     \
      (obj), sel_registerName(sel), __VA_ARGS__)
#define SEND0(R, obj, sel)                                                                         \
  ((R(*)(id, SEL))(void (*)(void))objc_msg_lookup((obj), sel_registerName(sel)))(                  \
      (obj), sel_registerName(sel))

static inline id sm_class_named(const char *name) { return (id)objc_getClass(name); }
static inline void sm_release(id o) { SEND0(void, o, "release"); }
static inline id sm_retain(id o) { return SEND0(id, o, "retain"); }
static inline const char *sm_utf8(id s) { return SEND0(const char *, s, "UTF8String"); }
static inline NSUInteger sm_u(id o, const char *sel) { return SEND0(NSUInteger, o, sel); }

/* An autoreleased NSString. */
static inline id sm_str(const char *s) {
  return SEND(id, (id, SEL, const char *, NSUInteger), sm_class_named("NSString"),
              "stringWithCString:encoding:", s, 4);
}
static inline const char *sm_error_text(id error) {
  return error ? sm_utf8(SEND0(id, error, "localizedDescription")) : "(no error)";
}

/* Objects alive once every committed command buffer has let go of its own
 * (completed handlers may run after waitUntilCompleted returns). */
static inline long sm_live(void) {
  softmetal_quiesce();
  struct softmetal_stats st;
  softmetal_stats(&st);
  return st.live_objects;
}

/* The teardown check of a suite's .fini: every softmetal object released.
 * Criterion ignores a failed assertion in .fini (the test still passes), so
 * this names the classes still alive and aborts the test's process, which
 * fails the test binary's exit status and so the ctest test. */
static inline void sm_check_all_released(const char *where) {
  const long live = sm_live();
  if (live == 0) return;
  static const char *const classes[] = {"SMDevice",
                                        "SMCommandQueue",
                                        "SMCommandBuffer",
                                        "SMComputeCommandEncoder",
                                        "SMBlitCommandEncoder",
                                        "SMLibrary",
                                        "SMFunction",
                                        "SMComputePipelineState",
                                        "SMBuffer",
                                        "SMHeap",
                                        "SMSharedEvent",
                                        "SMEvent",
                                        "SMFence",
                                        "SMBinaryArchive",
                                        "SMArgumentEncoder",
                                        "SMResidencySet",
                                        "SMBufferBinding",
                                        "SMThreadgroupBinding",
                                        "MTLCompileOptions",
                                        "NSString",
                                        "NSError",
                                        "NSArray",
                                        "NSDictionary"};
  fprintf(stderr, "%s: %ld softmetal objects alive after a test; every object must be released\n",
          where, live);
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
    if (softmetal_live_count(classes[i]) > 0)
      fprintf(stderr, "  %s: %ld alive\n", classes[i], softmetal_live_count(classes[i]));
  abort();
}

/* ---- blocks (clang Block ABI) ---- */
extern void *_NSConcreteStackBlock[32];

struct sm_test_ctx {
  atomic_int calls;
  atomic_int copies;
  atomic_int disposes;
  void *ptr;
  NSUInteger len;
  id arg;
  NSUInteger status_seen;
  atomic_int *order; /* shared sequence counter, optional */
  int order_seen;
};

struct sm_block_desc {
  unsigned long reserved, size;
  void (*copy)(void *dst, const void *src);
  void (*dispose)(const void *src);
};

struct sm_test_block {
  void *isa;
  int flags;
  int reserved;
  void (*invoke)(void);
  const struct sm_block_desc *desc;
  struct sm_test_ctx *ctx; /* captured */
};

__attribute__((unused)) static void sm_block_copy_helper(void *dst, const void *src) {
  const struct sm_test_block *s = src;
  (void)dst;
  atomic_fetch_add(&s->ctx->copies, 1);
}
__attribute__((unused)) static void sm_block_dispose_helper(const void *src) {
  const struct sm_test_block *s = src;
  atomic_fetch_add(&s->ctx->disposes, 1);
}
static const struct sm_block_desc sm_block_descriptor = {
    0, sizeof(struct sm_test_block), sm_block_copy_helper, sm_block_dispose_helper};

__attribute__((unused)) static void sm_dealloc_invoke(struct sm_test_block *b, void *ptr,
                                                      NSUInteger len) {
  b->ctx->ptr = ptr;
  b->ctx->len = len;
  atomic_fetch_add(&b->ctx->calls, 1);
}

__attribute__((unused)) static void sm_handler_invoke(struct sm_test_block *b, id cb) {
  b->ctx->arg = cb;
  b->ctx->status_seen = SEND0(NSUInteger, cb, "status");
  if (b->ctx->order) b->ctx->order_seen = atomic_fetch_add(b->ctx->order, 1);
  atomic_fetch_add(&b->ctx->calls, 1);
}

static inline struct sm_test_block sm_block(void (*invoke)(void), struct sm_test_ctx *ctx) {
  struct sm_test_block b = {_NSConcreteStackBlock, 1 << 25, 0, invoke, &sm_block_descriptor, ctx};
  return b;
}
#define SM_DEALLOC_BLOCK(ctx) sm_block((void (*)(void))sm_dealloc_invoke, (ctx))
#define SM_HANDLER_BLOCK(ctx) sm_block((void (*)(void))sm_handler_invoke, (ctx))

/* Runs fn(arg) in a child process with its stderr to a pipe and checks that
 * it aborts (SIGABRT); text (cap bytes) receives what it wrote, for the
 * caller's checks of the message. */
__attribute__((unused)) static void sm_expect_abort(void (*fn)(void *), void *arg, char *text,
                                                    size_t cap) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    fn(arg);
    _exit(0);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t r;
  while (n < cap - 1 && (r = read(fds[0], text + n, cap - 1 - n)) > 0) n += (size_t)r;
  text[n] = 0;
  close(fds[0]);
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "no abort: %s", text);
}

#endif
