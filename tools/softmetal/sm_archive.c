/* softmetal's library container: what newLibraryWithData:error: loads in
 * place of Apple's .metallib (which holds GPU code that cannot run on the
 * CPU), plus the libdispatch data objects that carry it.
 *
 * Container (little-endian), written by softmetal-metallib:
 *   bytes 0..7   "SMMTLLIB"
 *   u32          format version, 1
 *   u32          MTLMathMode the source is compiled with (Safe 0, Relaxed 1, Fast 2)
 *   u32          MTLLanguageVersion asked for (0: default; softmetal ignores it)
 *   u32          0
 *   u64          source length in bytes
 *   ...          the MSL source (UTF-8, no NUL)
 * It holds source, not machine code: loading it compiles the source as
 * newLibraryWithSource:options:error: does (softmetal's kernel cache makes a
 * second load cheap). Anything else gives nil and an NSError. */
#include "sm_internal.h"

#include <stdio.h>
#include <stdlib.h>

enum { HEADER_SIZE = 32, FORMAT_VERSION = 1 };
static const char magic[8] = {'S', 'M', 'M', 'T', 'L', 'L', 'I', 'B'};

#define LIB_ERROR_DOMAIN "MTLLibraryErrorDomain"
enum { LIB_ERROR_UNSUPPORTED = 1 };

/* dispatch_data_t: an immutable copy of some bytes. */
typedef struct {
  sm_obj hdr;
  void *bytes;
  size_t size;
} sm_dispatch_data;

static void data_destroy(sm_obj *o) { free(((sm_dispatch_data *)o)->bytes); }
static sm_class data_class = {"OS_dispatch_data", sizeof(sm_dispatch_data), data_destroy, Nil, 0};

SM_EXPORT id dispatch_data_create(const void *buffer, size_t size, void *queue, void *destructor);
SM_EXPORT void dispatch_release(id object);

id dispatch_data_create(const void *buffer, size_t size, void *queue, void *destructor) {
  (void)queue;
  if (destructor != NULL)
    sm__fatal("dispatch_data_create: softmetal supports only DISPATCH_DATA_DESTRUCTOR_DEFAULT "
              "(NULL: the bytes are copied)");
  if (size > 0 && buffer == NULL)
    sm__fatal("dispatch_data_create: buffer = NULL with size = %zu", size);
  sm_dispatch_data *d = sm__new(&data_class);
  if (d == NULL) return nil;
  d->bytes = malloc(size > 0 ? size : 1);
  if (d->bytes == NULL) {
    sm__release((id)d);
    return nil;
  }
  if (size > 0) memcpy(d->bytes, buffer, size);
  d->size = size;
  return (id)d;
}

void dispatch_release(id object) {
  if (object == nil) sm__fatal("dispatch_release: object = NULL");
  sm__release(object);
}

static uint32_t read_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t read_u64(const unsigned char *p) {
  return (uint64_t)read_u32(p) | (uint64_t)read_u32(p + 4) << 32;
}

static id fail(id *error, const char *sel, const char *why) {
  id e = sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_UNSUPPORTED, "%s: %s", sel, why);
  if (error) *error = sm__autorelease(e);
  else sm__release(e);
  return nil;
}

static id device_new_library_data(id self, SEL cmd, id data, id *error) {
  const char *sel = sel_getName(cmd);
  if (data == nil || !sm__is(data, &data_class))
    sm__fatal("-[SMDevice %s]: data is %s, not a dispatch_data_t", sel,
              data == nil ? "nil" : object_getClassName(data));
  const sm_dispatch_data *d = (const sm_dispatch_data *)data;
  const unsigned char *p = d->bytes;
  if (d->size >= 4 && memcmp(p, "MTLB", 4) == 0)
    return fail(error, sel, "this is an Apple metallib, whose GPU code cannot run on the CPU; "
                            "make softmetal's container with softmetal-metallib");
  if (d->size < HEADER_SIZE || memcmp(p, magic, sizeof magic) != 0)
    return fail(error, sel, "the data is not a library (no SMMTLLIB header)");
  if (read_u32(p + 8) != FORMAT_VERSION)
    return fail(error, sel, "the library container has an unknown format version");
  const uint32_t math_mode = read_u32(p + 12);
  const uint64_t length = read_u64(p + 24);
  if (math_mode > 2) return fail(error, sel, "the library container's math mode is not 0, 1 or 2");
  if (length != d->size - HEADER_SIZE)
    return fail(error, sel, "the library container is truncated or has trailing bytes");
  char *text = malloc((size_t)length + 1);
  if (text == NULL) return fail(error, sel, "out of memory");
  memcpy(text, p + HEADER_SIZE, (size_t)length);
  text[length] = '\0';
  if (memchr(text, '\0', (size_t)length) != NULL) {
    free(text);
    return fail(error, sel, "the library container's source has a NUL byte");
  }
  id source = sm__string(text);
  free(text);
  if (source == nil) return fail(error, sel, "the library container's source is not UTF-8");
  /* The same path as source libraries, through our own messages. */
  Class options_class = objc_getClass("MTLCompileOptions");
  id options = ((id (*)(id, SEL))sm__lookup((id)options_class, "alloc"))(
      (id)options_class, sel_registerName("alloc"));
  options = ((id (*)(id, SEL))sm__lookup(options, "init"))(options, sel_registerName("init"));
  ((void (*)(id, SEL, BOOL))(void (*)(void))sm__lookup(options, "setFastMathEnabled:"))(
      options, sel_registerName("setFastMathEnabled:"), math_mode != 0);
  if (math_mode != 0 && class_respondsToSelector(options_class, sel_registerName("setMathMode:")))
    ((void (*)(id, SEL, NSInteger))(void (*)(void))sm__lookup(options, "setMathMode:"))(
        options, sel_registerName("setMathMode:"), (NSInteger)math_mode);
  id library = ((id (*)(id, SEL, id, id, id *))(void (*)(void))sm__lookup(self, "newLibraryWithSource:options:error:"))(
      self, sel_registerName("newLibraryWithSource:options:error:"), source, options, error);
  sm__release(options);
  sm__release(source);
  return library;
}

void sm__register_archive(void) {
  Class c = sm__class_begin(&data_class);
  sm__class_end(&data_class);
  (void)c;
  Class device = objc_getClass("SMDevice");
  if (device == Nil) sm__fatal("softmetal: SMDevice is not registered before the archive methods");
  sm__method(device, "newLibraryWithData:error:", SM_IMP(device_new_library_data), "@@:@^@");
}
