/* SPDX-License-Identifier: MIT */
/* softmetal's <dispatch/dispatch.h>: the part of libdispatch's public API
 * that libsoftmetal.so answers (tools/softmetal/README.md, GCD), written from
 * Apple's documentation: names, types and constant values as Apple's
 * headers have them. Dispatch objects are C objects (as with
 * OS_OBJECT_USE_OBJC 0): retain and release them with dispatch_retain and
 * dispatch_release. Blocks need clang's -fblocks and libBlocksRuntime. */
#ifndef SOFTMETAL_DISPATCH_H
#define SOFTMETAL_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#define DISPATCH_API_VERSION 20181008

/* Objects. In C, dispatch_object_t takes any of them (a transparent union,
 * as Apple's C headers); in C++ the types derive from dispatch_object_s. */
#ifdef __cplusplus
struct dispatch_object_s {};
struct dispatch_queue_s : public dispatch_object_s {};
struct dispatch_queue_attr_s : public dispatch_object_s {};
struct dispatch_group_s : public dispatch_object_s {};
struct dispatch_semaphore_s : public dispatch_object_s {};
struct dispatch_data_s : public dispatch_object_s {};
typedef dispatch_object_s *dispatch_object_t;
#else
struct dispatch_object_s;
struct dispatch_queue_s;
struct dispatch_queue_attr_s;
struct dispatch_group_s;
struct dispatch_semaphore_s;
struct dispatch_data_s;
typedef union {
  struct dispatch_object_s *_do;
  struct dispatch_queue_s *_dq;
  struct dispatch_queue_attr_s *_dqa;
  struct dispatch_group_s *_dg;
  struct dispatch_semaphore_s *_dsema;
  struct dispatch_data_s *_ddata;
} dispatch_object_t __attribute__((__transparent_union__));
#endif
typedef struct dispatch_queue_s *dispatch_queue_t;
typedef struct dispatch_queue_s *dispatch_queue_global_t;
typedef struct dispatch_queue_s *dispatch_queue_serial_t;
typedef struct dispatch_queue_s *dispatch_queue_concurrent_t;
typedef struct dispatch_queue_attr_s *dispatch_queue_attr_t;
typedef struct dispatch_group_s *dispatch_group_t;
typedef struct dispatch_semaphore_s *dispatch_semaphore_t;
typedef struct dispatch_data_s *dispatch_data_t;

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*dispatch_function_t)(void *);
#ifdef __BLOCKS__
typedef void (^dispatch_block_t)(void);
#endif

void dispatch_retain(dispatch_object_t object);
void dispatch_release(dispatch_object_t object);

/* Time: nanoseconds. */
typedef uint64_t dispatch_time_t;
#define NSEC_PER_SEC 1000000000ull
#define NSEC_PER_MSEC 1000000ull
#define USEC_PER_SEC 1000000ull
#define NSEC_PER_USEC 1000ull
#define DISPATCH_TIME_NOW (0ull)
#define DISPATCH_TIME_FOREVER (~0ull)
dispatch_time_t dispatch_time(dispatch_time_t when, int64_t delta);

/* Queues. */
extern const struct dispatch_queue_attr_s _dispatch_queue_attr_concurrent;
#define DISPATCH_QUEUE_SERIAL ((dispatch_queue_attr_t)NULL)
#define DISPATCH_QUEUE_CONCURRENT ((dispatch_queue_attr_t)(void *)&_dispatch_queue_attr_concurrent)
#define DISPATCH_QUEUE_PRIORITY_HIGH 2
#define DISPATCH_QUEUE_PRIORITY_DEFAULT 0
#define DISPATCH_QUEUE_PRIORITY_LOW (-2)
#define DISPATCH_QUEUE_PRIORITY_BACKGROUND INT16_MIN
#ifndef QOS_CLASS_DEFAULT
typedef unsigned int qos_class_t;
#define QOS_CLASS_USER_INTERACTIVE 0x21u
#define QOS_CLASS_USER_INITIATED 0x19u
#define QOS_CLASS_DEFAULT 0x15u
#define QOS_CLASS_UTILITY 0x11u
#define QOS_CLASS_BACKGROUND 0x09u
#define QOS_CLASS_UNSPECIFIED 0x00u
#endif
#define DISPATCH_APPLY_AUTO ((dispatch_queue_t)NULL)

dispatch_queue_t dispatch_queue_create(const char *label, dispatch_queue_attr_t attr);
const char *dispatch_queue_get_label(dispatch_queue_t queue);
dispatch_queue_global_t dispatch_get_global_queue(intptr_t identifier, uintptr_t flags);
void dispatch_async_f(dispatch_queue_t queue, void *context, dispatch_function_t work);
void dispatch_sync_f(dispatch_queue_t queue, void *context, dispatch_function_t work);
void dispatch_apply_f(size_t iterations, dispatch_queue_t queue, void *context,
                      void (*work)(void *, size_t));
#ifdef __BLOCKS__
void dispatch_async(dispatch_queue_t queue, dispatch_block_t block);
void dispatch_sync(dispatch_queue_t queue, dispatch_block_t block);
void dispatch_apply(size_t iterations, dispatch_queue_t queue, void (^block)(size_t));
#endif

/* Groups. */
dispatch_group_t dispatch_group_create(void);
void dispatch_group_enter(dispatch_group_t group);
void dispatch_group_leave(dispatch_group_t group);
intptr_t dispatch_group_wait(dispatch_group_t group, dispatch_time_t timeout);
void dispatch_group_async_f(dispatch_group_t group, dispatch_queue_t queue, void *context,
                            dispatch_function_t work);
void dispatch_group_notify_f(dispatch_group_t group, dispatch_queue_t queue, void *context,
                             dispatch_function_t work);
#ifdef __BLOCKS__
void dispatch_group_async(dispatch_group_t group, dispatch_queue_t queue, dispatch_block_t block);
void dispatch_group_notify(dispatch_group_t group, dispatch_queue_t queue, dispatch_block_t block);
#endif

/* Semaphores. */
dispatch_semaphore_t dispatch_semaphore_create(intptr_t value);
intptr_t dispatch_semaphore_wait(dispatch_semaphore_t dsema, dispatch_time_t timeout);
intptr_t dispatch_semaphore_signal(dispatch_semaphore_t dsema);

/* Data (as newLibraryWithData:error: takes it). The destructor runs on the
 * thread that releases the object; the queue argument is not used. */
#ifdef __BLOCKS__
extern const dispatch_block_t _dispatch_data_destructor_free;
extern const dispatch_block_t _dispatch_data_destructor_munmap;
#define DISPATCH_DATA_DESTRUCTOR_DEFAULT NULL
#define DISPATCH_DATA_DESTRUCTOR_FREE (_dispatch_data_destructor_free)
#define DISPATCH_DATA_DESTRUCTOR_MUNMAP (_dispatch_data_destructor_munmap)
dispatch_data_t dispatch_data_create(const void *buffer, size_t size, dispatch_queue_t queue,
                                     dispatch_block_t destructor);
#endif

#ifdef __cplusplus
}
#endif

#endif
