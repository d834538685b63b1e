/* SPDX-License-Identifier: MIT */
/* softmetal command queues, command buffers, blit encoders and events. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "softmetal/sm_test.h"

enum { NotEnqueued, Enqueued, Committed, Scheduled, Completed, Error };

static id dev, queue;
static id volatile keep; /* reachable when a test aborts on purpose */
static void *pool;
static void setup(void) {
  dev = MTLCreateSystemDefaultDevice();
  queue = SEND0(id, dev, "newCommandQueue");
  pool = objc_autoreleasePoolPush();
}
static void teardown(void) {
  objc_autoreleasePoolPop(pool);
  unsetenv("SOFTMETAL_SEED");
  sm_release(queue);
  sm_release(dev);
  sm_check_all_released(__FILE__);
}
TestSuite(commands, .init = setup, .fini = teardown);

static id new_buffer(NSUInteger len) {
  return SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", len, 0ul);
}
static id cmdbuf(void) { return SEND0(id, queue, "commandBuffer"); }
static NSUInteger status(id cb) { return sm_u(cb, "status"); }
static void commit_wait(id cb) {
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
}
static void copy(id enc, id src, NSUInteger so, id dst, NSUInteger d, NSUInteger n) {
  SEND(void, (id, SEL, id, NSUInteger, id, NSUInteger, NSUInteger), enc,
       "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", src, so, dst, d, n);
}
static void fill(id enc, id buf, NSUInteger at, NSUInteger n, uint8_t v) {
  SEND(void, (id, SEL, id, NSRange, uint8_t), enc, "fillBuffer:range:value:", buf,
       ((NSRange){at, n}), v);
}

Test(commands, empty_command_buffer_walks_the_status_sequence) {
  id cb = cmdbuf();
  cr_assert_eq(status(cb), NotEnqueued);
  SEND0(void, cb, "enqueue");
  cr_assert_eq(status(cb), Enqueued);
  struct sm_test_ctx ctx = {0};
  struct sm_test_block blk = SM_HANDLER_BLOCK(&ctx);
  SEND(void, (id, SEL, void *), cb, "addCompletedHandler:", &blk);
  SEND0(void, cb, "commit");
  cr_assert_geq(status(cb), Committed);
  SEND0(void, cb, "waitUntilCompleted");
  cr_assert_eq(status(cb), Completed);
  cr_assert_null(SEND0(id, cb, "error"));
  softmetal_quiesce(); /* handlers may run after waitUntilCompleted returns */
  cr_assert_eq(atomic_load(&ctx.calls), 1);
  cr_assert_eq(ctx.arg, cb);
  cr_assert_eq(ctx.status_seen, Completed, "handlers see the final status");
  cr_assert_eq(atomic_load(&ctx.disposes), 1, "handler released once");
}

Test(commands, a_command_buffer_blocked_on_an_event_is_scheduled) {
  id event = SEND0(id, dev, "newSharedEvent");
  id cb = cmdbuf();
  SEND(void, (id, SEL, id, uint64_t), cb, "encodeWaitForEvent:value:", event, 1);
  SEND0(void, cb, "commit");
  NSUInteger st;
  while ((st = status(cb)) != Scheduled) /* the queue thread picks it up, then blocks */
    cr_assert_eq(st, Committed);
  SEND(void, (id, SEL, uint64_t), event, "setSignaledValue:", 1);
  SEND0(void, cb, "waitUntilCompleted");
  cr_assert_eq(status(cb), Completed);
  sm_release(event);
}

Test(commands, blit_copy_and_fill) {
  id a = new_buffer(64), b = new_buffer(64);
  unsigned char *pa = SEND0(void *, a, "contents"), *pb = SEND0(void *, b, "contents");
  for (int i = 0; i < 64; i++) pa[i] = (unsigned char)i;
  id cb = cmdbuf();
  id enc = SEND0(id, cb, "blitCommandEncoder");
  fill(enc, b, 0, 64, 0xAB);
  copy(enc, a, 8, b, 16, 8);
  SEND(void, (id, SEL, id), enc, "synchronizeResource:", a); /* Shared: an error */
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Error);
  cr_assert(strstr(sm_error_text(SEND0(id, cb, "error")), "synchronizeResource:"));
  cr_assert_eq(pb[0], 0, "a failed command buffer runs nothing");

  cb = cmdbuf();
  enc = SEND0(id, cb, "blitCommandEncoder");
  fill(enc, b, 0, 64, 0xAB);
  copy(enc, a, 8, b, 16, 8);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Completed);
  cr_assert_eq(pb[15], 0xAB);
  for (int i = 0; i < 8; i++) cr_assert_eq(pb[16 + i], 8 + i);
  cr_assert_eq(pb[24], 0xAB);
  sm_release(a);
  sm_release(b);
}

Test(commands, blit_range_errors_fail_the_command_buffer) {
  id a = new_buffer(64), b = new_buffer(32);
  struct {
    const char *what;
    NSUInteger so, d, n;
  } cases[] = {
      {"sourceOffset = 60 + size = 8 exceeds source length 64", 60, 0, 8},
      {"destinationOffset = 32 + size = 4 exceeds destination length 32", 0, 32, 4},
      {"sourceOffset = 18446744073709551612", (NSUInteger)-4, 0, 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    id cb = cmdbuf();
    id enc = SEND0(id, cb, "blitCommandEncoder");
    copy(enc, a, cases[i].so, b, cases[i].d, cases[i].n);
    SEND0(void, enc, "endEncoding");
    commit_wait(cb);
    cr_assert_eq(status(cb), Error);
    id err = SEND0(id, cb, "error");
    cr_assert_str_eq(sm_utf8(SEND0(id, err, "domain")), "MTLCommandBufferErrorDomain");
    cr_assert_neq(SEND0(NSInteger, err, "code"), 0);
    cr_assert(strstr(sm_error_text(err), cases[i].what), "%s", sm_error_text(err));
  }
  id cb = cmdbuf();
  id enc = SEND0(id, cb, "blitCommandEncoder");
  fill(enc, b, 16, 20, 0);
  copy(enc, a, 0, a, 4, 8); /* overlap in one buffer */
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert(strstr(sm_error_text(SEND0(id, cb, "error")), "range = {16, 20} exceeds"));
  cb = cmdbuf();
  enc = SEND0(id, cb, "blitCommandEncoder");
  copy(enc, a, 0, a, 4, 8);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert(strstr(sm_error_text(SEND0(id, cb, "error")), "overlaps"));
  sm_release(a);
  sm_release(b);
}

Test(commands, managed_buffers_synchronize) {
  id m = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", 16, 16ul);
  id cb = cmdbuf();
  id enc = SEND0(id, cb, "blitCommandEncoder");
  fill(enc, m, 0, 16, 3);
  SEND(void, (id, SEL, id), enc, "synchronizeResource:", m);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Completed);
  cr_assert_eq(((unsigned char *)SEND0(void *, m, "contents"))[15], 3);
  sm_release(m);
}

static id new_managed(NSUInteger len) {
  return SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", len,
              16ul);
}
static void did_modify(id buf, NSUInteger at, NSUInteger n) {
  SEND(void, (id, SEL, NSRange), buf, "didModifyRange:", ((NSRange){at, n}));
}
/* Copies the GPU's view of src into a fresh Shared buffer; returns its contents. */
static unsigned char *gpu_view(id src, NSUInteger n, id *out) {
  *out = new_buffer(n);
  id cb = cmdbuf();
  id enc = SEND0(id, cb, "blitCommandEncoder");
  copy(enc, src, 0, *out, 0, n);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Completed, "%s", sm_error_text(SEND0(id, cb, "error")));
  return SEND0(void *, *out, "contents");
}

Test(commands, managed_gpu_copy_sees_host_writes_only_after_did_modify_range) {
  id m = new_managed(16), out;
  unsigned char *host = SEND0(void *, m, "contents");
  memset(host, 1, 16);
  unsigned char *seen = gpu_view(m, 16, &out);
  for (int i = 0; i < 16; i++) cr_assert_eq(seen[i], 0, "byte %d: the GPU copy is stale", i);
  sm_release(out);
  did_modify(m, 0, 8); /* only this range goes to the GPU */
  seen = gpu_view(m, 16, &out);
  for (int i = 0; i < 16; i++) cr_assert_eq(seen[i], i < 8 ? 1 : 0, "byte %d", i);
  sm_release(out);
  sm_release(m);
}

Test(commands, managed_host_copy_sees_gpu_writes_only_after_synchronize) {
  id m = new_managed(16);
  unsigned char *host = SEND0(void *, m, "contents");
  id cb = cmdbuf();
  id enc = SEND0(id, cb, "blitCommandEncoder");
  fill(enc, m, 0, 16, 3);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Completed);
  cr_assert_eq(host[0], 0, "the host copy is stale until synchronizeResource:");
  cb = cmdbuf();
  enc = SEND0(id, cb, "blitCommandEncoder");
  SEND(void, (id, SEL, id), enc, "synchronizeResource:", m);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  for (int i = 0; i < 16; i++) cr_assert_eq(host[i], 3);
  sm_release(m);
}

Test(commands, blits_need_offsets_and_sizes_in_multiples_of_4) {
  id a = new_buffer(64), b = new_buffer(64);
  struct {
    NSUInteger so, d, n;
  } copies[] = {{1, 0, 4}, {0, 2, 4}, {0, 0, 3}, {4, 8, 6}};
  for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++) {
    id cb = cmdbuf();
    id enc = SEND0(id, cb, "blitCommandEncoder");
    copy(enc, a, copies[i].so, b, copies[i].d, copies[i].n);
    SEND0(void, enc, "endEncoding");
    commit_wait(cb);
    cr_assert_eq(status(cb), Error, "copy %zu", i);
    const char *msg = sm_error_text(SEND0(id, cb, "error"));
    cr_assert(strstr(msg, "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:") &&
                  strstr(msg, "multiples of 4"),
              "%s", msg);
  }
  NSUInteger fills[][2] = {{2, 4}, {0, 6}, {0, 0}};
  for (size_t i = 0; i < sizeof fills / sizeof fills[0]; i++) {
    id cb = cmdbuf();
    id enc = SEND0(id, cb, "blitCommandEncoder");
    fill(enc, b, fills[i][0], fills[i][1], 1);
    SEND0(void, enc, "endEncoding");
    commit_wait(cb);
    cr_assert_eq(status(cb), Error, "fill %zu", i);
    const char *msg = sm_error_text(SEND0(id, cb, "error"));
    cr_assert(strstr(msg, "fillBuffer:range:value:") && strstr(msg, "multiples of 4"), "%s", msg);
  }
  id cb = cmdbuf();
  id enc = SEND0(id, cb, "blitCommandEncoder");
  copy(enc, a, 4, b, 60, 4);
  fill(enc, a, 60, 4, 1);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Completed);
  sm_release(a);
  sm_release(b);
}

Test(commands, private_buffers_take_blits) {
  id priv =
      SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", 16, 32ul);
  id out = new_buffer(16);
  id cb = cmdbuf();
  id enc = SEND0(id, cb, "blitCommandEncoder");
  fill(enc, priv, 0, 16, 7);
  copy(enc, priv, 0, out, 0, 16);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Completed);
  cr_assert_eq(((unsigned char *)SEND0(void *, out, "contents"))[15], 7);
  sm_release(priv);
  sm_release(out);
}

Test(commands, command_buffers_execute_in_commit_order) {
  enum { N = 64 }; /* a queue's maximum of uncompleted command buffers */
  id buf = new_buffer(4 * N);
  atomic_int order = 0;
  struct sm_test_ctx ctx[N];
  struct sm_test_block blk[N];
  id cbs[N];
  memset(ctx, 0, sizeof ctx);
  for (int i = 0; i < N; i++) {
    cbs[i] = cmdbuf();
    id enc = SEND0(id, cbs[i], "blitCommandEncoder");
    fill(enc, buf, 0, 4 * ((NSUInteger)i + 1), (uint8_t)i); /* each overwrites the ones before */
    SEND0(void, enc, "endEncoding");
    ctx[i].order = &order;
    blk[i] = SM_HANDLER_BLOCK(&ctx[i]);
    SEND(void, (id, SEL, void *), cbs[i], "addCompletedHandler:", &blk[i]);
  }
  /* Commit in reverse creation order: commit order is what counts. */
  for (int i = N - 1; i >= 0; i--) SEND0(void, cbs[i], "commit");
  SEND0(void, cbs[0], "waitUntilCompleted");
  softmetal_quiesce();
  unsigned char *p = SEND0(void *, buf, "contents");
  for (int i = 0; i < N; i++) {
    cr_assert_eq(ctx[i].order_seen, N - 1 - i, "command buffer %d completed out of order", i);
    cr_assert_eq(atomic_load(&ctx[i].disposes), 1);
  }
  cr_assert_eq(p[0], 0, "the last committed (index 0) wrote byte 0 last");
  cr_assert_eq(p[4 * N - 1], N - 1);
  sm_release(buf);
}

Test(commands, unretained_references_do_not_retain_buffers) {
  id buf = new_buffer(16);
  id cb = SEND0(id, queue, "commandBufferWithUnretainedReferences");
  id enc = SEND0(id, cb, "blitCommandEncoder");
  fill(enc, buf, 0, 16, 1);
  cr_assert_eq(sm_u(buf, "retainCount"), 1);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Completed);

  cb = cmdbuf();
  enc = SEND0(id, cb, "blitCommandEncoder");
  fill(enc, buf, 0, 16, 1);
  cr_assert_eq(sm_u(buf, "retainCount"), 2);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  sm_release(buf);
}

struct signaller {
  id event;
  uint64_t value;
};
static void *signal_later(void *arg) {
  struct signaller *s = arg;
  SEND(void, (id, SEL, uint64_t), s->event, "setSignaledValue:", s->value);
  return NULL;
}

Test(commands, shared_event_signal_and_wait_across_queues) {
  id event = SEND0(id, dev, "newSharedEvent");
  id queue2 = SEND0(id, dev, "newCommandQueue");
  id buf = new_buffer(16);
  unsigned char *p = SEND0(void *, buf, "contents");
  /* queue2 waits for 1, then writes; queue signals 1 after its own write. */
  id waiter = SEND0(id, queue2, "commandBuffer");
  SEND(void, (id, SEL, id, uint64_t), waiter, "encodeWaitForEvent:value:", event, 1);
  id enc = SEND0(id, waiter, "blitCommandEncoder");
  fill(enc, buf, 8, 8, 2);
  SEND0(void, enc, "endEncoding");
  SEND(void, (id, SEL, id, uint64_t), waiter, "encodeSignalEvent:value:", event, 2);
  SEND0(void, waiter, "commit");

  id first = cmdbuf();
  enc = SEND0(id, first, "blitCommandEncoder");
  fill(enc, buf, 0, 8, 1);
  SEND0(void, enc, "endEncoding");
  SEND(void, (id, SEL, id, uint64_t), first, "encodeSignalEvent:value:", event, 1);
  SEND0(void, first, "commit");
  SEND0(void, waiter, "waitUntilCompleted");
  cr_assert_eq(status(waiter), Completed);
  cr_assert_eq(p[0], 1);
  cr_assert_eq(p[8], 2);
  cr_assert_eq(SEND0(uint64_t, event, "signaledValue"), 2);

  /* A wait released from the CPU. */
  id cb = SEND0(id, queue2, "commandBuffer");
  SEND(void, (id, SEL, id, uint64_t), cb, "encodeWaitForEvent:value:", event, 5);
  SEND0(void, cb, "commit");
  struct signaller s = {event, 5};
  pthread_t t;
  pthread_create(&t, NULL, signal_later, &s);
  SEND0(void, cb, "waitUntilCompleted");
  pthread_join(t, NULL);
  cr_assert_eq(status(cb), Completed);
  SEND0(void, first, "waitUntilCompleted");
  sm_release(buf);
  sm_release(queue2);
  sm_release(event);
}

Test(commands, objects_know_their_device_queue_and_label) {
  id buf = new_buffer(16);
  id cb = cmdbuf();
  cr_assert_eq(SEND0(id, buf, "device"), dev);
  cr_assert_eq(SEND0(id, queue, "device"), dev);
  cr_assert_eq(SEND0(id, cb, "commandQueue"), queue);
  cr_assert_eq(SEND0(id, cb, "device"), dev);
  cr_assert_null(SEND0(id, buf, "label"));
  SEND(void, (id, SEL, id), buf, "setLabel:", sm_str("weights"));
  cr_assert_str_eq(sm_utf8(SEND0(id, buf, "label")), "weights");
  SEND(void, (id, SEL, id), cb, "setLabel:", sm_str("step 1"));
  cr_assert_str_eq(sm_utf8(SEND0(id, cb, "label")), "step 1");
  SEND(void, (id, SEL, id), cb, "setLabel:", (id)0);
  cr_assert_null(SEND0(id, cb, "label"));
  sm_release(buf);
}

Test(commands, commit_twice_aborts, .signal = SIGABRT) {
  id cb = cmdbuf();
  SEND0(void, cb, "commit");
  SEND0(void, cb, "commit");
}

Test(commands, encoding_after_commit_aborts, .signal = SIGABRT) {
  id cb = cmdbuf();
  SEND0(void, cb, "commit");
  SEND0(id, cb, "blitCommandEncoder");
}

Test(commands, encoder_used_after_commit_aborts, .signal = SIGABRT) {
  id buf = keep = new_buffer(16);
  id cb = cmdbuf();
  id enc = SEND0(id, cb, "blitCommandEncoder");
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  fill(enc, buf, 0, 1, 0);
}

Test(commands, commit_with_open_encoder_aborts, .signal = SIGABRT) {
  id cb = cmdbuf();
  SEND0(id, cb, "blitCommandEncoder");
  SEND0(void, cb, "commit");
}

Test(commands, second_encoder_before_end_encoding_aborts, .signal = SIGABRT) {
  id cb = cmdbuf();
  SEND0(id, cb, "blitCommandEncoder");
  SEND0(id, cb, "computeCommandEncoder");
}

Test(commands, encoder_released_without_end_encoding_aborts, .signal = SIGABRT) {
  void *inner = objc_autoreleasePoolPush();
  SEND0(id, cmdbuf(), "blitCommandEncoder");
  objc_autoreleasePoolPop(inner);
}

Test(commands, completed_handler_after_commit_aborts, .signal = SIGABRT) {
  struct sm_test_ctx ctx = {0};
  struct sm_test_block blk = SM_HANDLER_BLOCK(&ctx);
  id cb = cmdbuf();
  SEND0(void, cb, "commit");
  SEND(void, (id, SEL, void *), cb, "addCompletedHandler:", &blk);
}

Test(commands, wait_before_commit_aborts, .signal = SIGABRT) {
  SEND0(void, cmdbuf(), "waitUntilCompleted");
}

Test(commands, uncommitted_command_buffer_releases_its_handlers_without_running_them) {
  struct sm_test_ctx ctx = {0};
  struct sm_test_block blk = SM_HANDLER_BLOCK(&ctx);
  void *inner = objc_autoreleasePoolPush();
  id cb = cmdbuf();
  SEND(void, (id, SEL, void *), cb, "addCompletedHandler:", &blk);
  objc_autoreleasePoolPop(inner);
  cr_assert_eq(atomic_load(&ctx.calls), 0);
  cr_assert_eq(atomic_load(&ctx.disposes), 1);
}

struct thread_ctx {
  struct sm_test_ctx base; /* first: the block captures a pointer to it */
  pthread_t thread;
};
static void thread_handler(struct sm_test_block *b, id cb) {
  (void)cb;
  ((struct thread_ctx *)b->ctx)->thread = pthread_self();
  atomic_fetch_add(&b->ctx->calls, 1);
}

/* A scheduled handler that holds its command buffer 2 ms before it runs. */
static void hold_handler(struct sm_test_block *b, id cb) {
  (void)cb;
  const struct timespec hold = {0, 2000000};
  nanosleep(&hold, NULL);
  atomic_fetch_add(&b->ctx->calls, 1);
}

/* softmetal lets a waiter return before the handlers run (a late coin) when
 * the waiter comes within 0.2 ms of the completion; each command buffer here
 * is held 2 ms before it runs, so that its waiter is there first even when
 * the test shares a slow machine (qemu, two suites at once). */
Test(commands, completed_handlers_run_on_another_thread_before_or_after_the_wait) {
  enum { N = 64 };
  setenv("SOFTMETAL_SEED", "12345", 1); /* the queue's coins: reproducible */
  id q = SEND0(id, dev, "newCommandQueue");
  static struct thread_ctx ctx[N];
  static struct sm_test_ctx held[N];
  struct sm_test_block blk[N], hold[N];
  int late = 0, early = 0;
  for (int i = 0; i < N; i++) {
    id cb = SEND0(id, q, "commandBuffer");
    hold[i] = sm_block((void (*)(void))hold_handler, &held[i]);
    SEND(void, (id, SEL, void *), cb, "addScheduledHandler:", &hold[i]);
    blk[i] = sm_block((void (*)(void))thread_handler, &ctx[i].base);
    SEND(void, (id, SEL, void *), cb, "addCompletedHandler:", &blk[i]);
    commit_wait(cb);
    cr_assert_eq(status(cb), Completed, "the status is final when the wait returns");
    if (atomic_load(&ctx[i].base.calls) == 0)
      late++;
    else
      early++;
  }
  softmetal_quiesce();
  for (int i = 0; i < N; i++) {
    cr_assert_eq(atomic_load(&held[i].calls), 1);
    cr_assert_eq(atomic_load(&ctx[i].base.calls), 1);
    cr_assert_eq(atomic_load(&ctx[i].base.disposes), 1);
    cr_assert(!pthread_equal(ctx[i].thread, pthread_self()), "handlers run on another thread");
  }
  cr_assert_gt(late, 0, "some handlers had not run when waitUntilCompleted returned");
  cr_assert_gt(early, 0, "and some had");
  sm_release(q);
}

struct taker {
  id queue;
  atomic_int got;
};
static void *take_command_buffer(void *arg) {
  struct taker *t = arg;
  void *p = objc_autoreleasePoolPush();
  SEND0(id, t->queue, "commandBuffer"); /* blocks while the queue is full */
  atomic_store(&t->got, 1);
  objc_autoreleasePoolPop(p); /* never committed: released, its slot freed */
  return NULL;
}
static long blocked(void) {
  struct softmetal_stats st;
  softmetal_stats(&st);
  return st.blocked_in_command_buffer;
}

Test(commands, command_buffer_blocks_at_the_queue_maximum_until_one_completes) {
  id q = SEND(id, (id, SEL, NSUInteger), dev, "newCommandQueueWithMaxCommandBufferCount:", 2ul);
  id a = SEND0(id, q, "commandBuffer"), b = SEND0(id, q, "commandBuffer");
  struct taker t = {q, 0};
  pthread_t thread;
  pthread_create(&thread, NULL, take_command_buffer, &t);
  while (blocked() == 0) /* wait until it is blocked in commandBuffer */
    sched_yield();
  cr_assert_eq(atomic_load(&t.got), 0, "a third one waits: two are uncompleted");
  commit_wait(a);
  pthread_join(thread, NULL);
  cr_assert_eq(atomic_load(&t.got), 1, "the completed one freed a place");
  cr_assert_eq(blocked(), 0);
  commit_wait(b);
  void *inner = objc_autoreleasePoolPush(); /* uncommitted ones free their place when they go */
  SEND0(id, q, "commandBuffer");
  SEND0(id, q, "commandBuffer");
  objc_autoreleasePoolPop(inner);
  commit_wait(SEND0(id, q, "commandBuffer"));
  sm_release(q);
}

Test(commands, queues_complete_independently) {
  id event = SEND0(id, dev, "newSharedEvent");
  id q2 = SEND0(id, dev, "newCommandQueue");
  id stuck = cmdbuf();
  SEND(void, (id, SEL, id, uint64_t), stuck, "encodeWaitForEvent:value:", event, 1);
  SEND0(void, stuck, "commit");
  id free_cb = SEND0(id, q2, "commandBuffer");
  commit_wait(free_cb); /* completes while the other queue's first is still blocked */
  cr_assert_eq(status(free_cb), Completed);
  cr_assert_lt(status(stuck), Completed, "committed first, completes last");
  SEND(void, (id, SEL, uint64_t), event, "setSignaledValue:", 1);
  SEND0(void, stuck, "waitUntilCompleted");
  cr_assert_eq(status(stuck), Completed);
  sm_release(q2);
  sm_release(event);
}

Test(commands, resources_of_another_device_fail_the_command_buffer) {
  setenv("SOFTMETAL_DEVICE_COUNT", "2", 1);
  id all = MTLCopyAllDevices();
  id other = SEND(id, (id, SEL, NSUInteger), all, "objectAtIndex:", 1ul);
  cr_assert_neq(other, dev);
  id theirs =
      SEND(id, (id, SEL, NSUInteger, NSUInteger), other, "newBufferWithLength:options:", 16ul, 0ul);
  id mine = new_buffer(16);
  id cb = cmdbuf();
  id enc = SEND0(id, cb, "blitCommandEncoder");
  copy(enc, theirs, 0, mine, 0, 16);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Error);
  const char *msg = sm_error_text(SEND0(id, cb, "error"));
  cr_assert(strstr(msg, "sourceBuffer belongs to device 'softmetal 1 (software Metal on the "
                        "CPU)'") &&
                strstr(msg, "not to the command queue's device 'softmetal "
                            "(software Metal on the CPU)'"),
            "%s", msg);
  cb = cmdbuf();
  enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", theirs, 0ul,
       0ul);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Error);
  cr_assert(strstr(sm_error_text(SEND0(id, cb, "error")), "setBuffer:offset:atIndex:: buffer "
                                                          "belongs to device 'softmetal 1"));
  id fence = SEND0(id, other, "newFence");
  cb = cmdbuf();
  enc = SEND0(id, cb, "blitCommandEncoder");
  SEND(void, (id, SEL, id), enc, "updateFence:", fence);
  SEND0(void, enc, "endEncoding");
  commit_wait(cb);
  cr_assert_eq(status(cb), Error);
  cr_assert(strstr(sm_error_text(SEND0(id, cb, "error")), "updateFence:: fence belongs to"));
  sm_release(fence);
  sm_release(theirs);
  sm_release(mine);
  sm_release(all);
  unsetenv("SOFTMETAL_DEVICE_COUNT");
}
