/* SPDX-License-Identifier: MIT */
/* softmetal argument encoders (MTLArgumentEncoder), from
 * -[MTLFunction newArgumentEncoderWithBufferIndex:]: Tier 2 argument buffers
 * as kernels declare them, a struct of device/constant pointers and plain
 * data. The layout is clang's (the kernel's own code, softmetal_argbuf);
 * setBuffer:offset:atIndex: writes the host address kernels dereference
 * (the buffer's storage + offset), never gpuAddress, which softmetal leaves
 * unmapped. Misuse that Metal's validation stops aborts with a message.
 * Thread-safety: as Metal, an encoder is used by one thread at a time. */
#include "sm_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "sm_abi.h"

typedef struct {
  sm_obj hdr;
  id device;   /* retained */
  id function; /* retained: its code holds the layout */
  const struct sm_argbuf_layout *layout;
  uint32_t *ids; /* [layout->n]: each member's first index */
  id buffer;     /* the argument buffer, retained, or nil */
  NSUInteger offset;
} sm_argenc;

static void argenc_destroy(sm_obj *o) {
  sm_argenc *e = (sm_argenc *)o;
  sm__release(e->buffer);
  sm__release(e->function);
  sm__release(e->device);
  free(e->ids);
}
static sm_class argenc_class = {"SMArgumentEncoder", sizeof(sm_argenc), argenc_destroy, Nil, 0};

static id fn_new_encoder(id self, SEL cmd, NSUInteger index) {
  const char *sel = sel_getName(cmd);
  if (index >= SM_MAX_BINDINGS)
    sm__fatal("-[MTLFunction %s]: bufferIndex = %lu must be < %u", sel, index, SM_MAX_BINDINGS);
  char *diag = NULL;
  id device = nil;
  const struct sm_argbuf_layout *l = sm__function_argbuf(self, (unsigned)index, &device, &diag);
  if (!l) {
    if (diag) sm__fatal("-[MTLFunction %s]: %s", sel, diag);
    sm__fatal("-[MTLFunction %s]: buffer %lu of the function is not an argument buffer: "
              "softmetal encodes a [[buffer(n)]] pointer or reference to a struct of "
              "program_source with [[id(k)]] members or device/constant pointer members "
              "(no bit-fields, references or nested definitions)",
              sel, index);
  }
  sm_argenc *e = sm__new(&argenc_class);
  uint32_t *ids = e ? calloc(l->n ? l->n : 1, sizeof *ids) : NULL;
  if (!ids) {
    if (e) sm__release((id)e);
    return nil;
  }
  uint32_t next = 0;
  for (uint32_t i = 0; i < l->n; i++) {
    const struct sm_argbuf_member *m = &l->members[i];
    ids[i] = m->id == SM_ARGBUF_IMPLICIT ? next : m->id;
    next = ids[i] + m->count;
  }
  for (uint32_t i = 0; i < l->n; i++)
    for (uint32_t j = i + 1; j < l->n; j++)
      if (ids[i] < ids[j] + l->members[j].count && ids[j] < ids[i] + l->members[i].count)
        sm__fatal("-[MTLFunction %s]: members %u and %u of the argument buffer at buffer %lu "
                  "share [[id(%u)]]",
                  sel, i, j, index, ids[i] > ids[j] ? ids[i] : ids[j]);
  e->ids = ids;
  e->layout = l;
  e->device = sm__retain(device);
  e->function = sm__retain(self);
  return (id)e;
}

/* The member holding index, and the element within it. */
static const struct sm_argbuf_member *member_at(sm_argenc *e, const char *sel, NSUInteger index,
                                                uint32_t *elem) {
  for (uint32_t i = 0; i < e->layout->n; i++)
    if (index >= e->ids[i] && index - e->ids[i] < e->layout->members[i].count) {
      *elem = (uint32_t)(index - e->ids[i]);
      return &e->layout->members[i];
    }
  sm__fatal("-[MTLArgumentEncoder %s]: index = %lu is no member of the argument buffer "
            "(its [[id]]s: %u members)",
            sel, index, e->layout->n);
}

static unsigned char *slot(sm_argenc *e, const char *sel, const struct sm_argbuf_member *m,
                           uint32_t elem) {
  if (!e->buffer)
    sm__fatal("-[MTLArgumentEncoder %s]: no argument buffer (send setArgumentBuffer:offset: first)",
              sel);
  unsigned char *base = ((void *(*)(id, SEL))(void (*)(void))sm__lookup(e->buffer, "contents"))(
      e->buffer, sel_registerName("contents"));
  return base + e->offset + m->offset + (size_t)elem * m->size;
}

static NSUInteger enc_length(id self, SEL cmd) {
  (void)cmd;
  return ((sm_argenc *)self)->layout->size;
}
static NSUInteger enc_alignment(id self, SEL cmd) {
  (void)cmd;
  return ((sm_argenc *)self)->layout->align;
}
static id enc_device(id self, SEL cmd) {
  (void)cmd;
  return ((sm_argenc *)self)->device;
}

static void set_arg_buffer(sm_argenc *e, const char *sel, id buffer, NSUInteger offset) {
  NSUInteger len = 0;
  if (buffer && !sm__buffer_gpu(buffer, &len))
    sm__fatal("-[MTLArgumentEncoder %s]: buffer is a %s, not an MTLBuffer", sel,
              object_getClassName(buffer));
  if (buffer) {
    void *host = ((void *(*)(id, SEL))(void (*)(void))sm__lookup(buffer, "contents"))(
        buffer, sel_registerName("contents"));
    if (!host)
      sm__fatal("-[MTLArgumentEncoder %s]: the argument buffer has Private storage; the CPU "
                "cannot encode into it",
                sel);
    if (offset > len || len - offset < e->layout->size)
      sm__fatal("-[MTLArgumentEncoder %s]: offset %lu + encodedLength %u exceeds the buffer's "
                "length %lu",
                sel, offset, e->layout->size, len);
    if (offset % e->layout->align)
      sm__fatal("-[MTLArgumentEncoder %s]: offset %lu is not a multiple of alignment %u", sel,
                offset, e->layout->align);
  }
  sm__retain(buffer);
  sm__release(e->buffer);
  e->buffer = buffer;
  e->offset = offset;
}
static void enc_set_arg_buffer(id self, SEL cmd, id buffer, NSUInteger offset) {
  set_arg_buffer((sm_argenc *)self, sel_getName(cmd), buffer, offset);
}
static void enc_set_arg_buffer_elem(id self, SEL cmd, id buffer, NSUInteger start,
                                    NSUInteger element) {
  sm_argenc *e = (sm_argenc *)self;
  NSUInteger stride = e->layout->size;
  if (element && stride > ((NSUInteger)-1 - start) / element)
    sm__fatal("-[MTLArgumentEncoder %s]: startOffset %lu + arrayElement %lu * %lu overflows",
              sel_getName(cmd), start, element, stride);
  set_arg_buffer(e, sel_getName(cmd), buffer, start + element * stride);
}

static void set_buffer(sm_argenc *e, const char *sel, id buffer, NSUInteger offset,
                       NSUInteger index) {
  uint32_t elem;
  const struct sm_argbuf_member *m = member_at(e, sel, index, &elem);
  if (!m->pointer)
    sm__fatal("-[MTLArgumentEncoder %s]: index %lu is a data member, not a buffer pointer "
              "(use constantDataAtIndex:)",
              sel, index);
  void *p = NULL;
  if (buffer) {
    NSUInteger len = 0;
    unsigned char *gpu = sm__buffer_gpu(buffer, &len);
    if (!gpu)
      sm__fatal("-[MTLArgumentEncoder %s]: buffer is a %s, not an MTLBuffer", sel,
                object_getClassName(buffer));
    if (offset > len)
      sm__fatal("-[MTLArgumentEncoder %s]: offset %lu is past the buffer's length %lu", sel, offset,
                len);
    p = gpu + offset;
  }
  memcpy(slot(e, sel, m, elem), &p, sizeof p);
}
static void enc_set_buffer(id self, SEL cmd, id buffer, NSUInteger offset, NSUInteger index) {
  set_buffer((sm_argenc *)self, sel_getName(cmd), buffer, offset, index);
}
static void enc_set_buffers(id self, SEL cmd, const id *buffers, const NSUInteger *offsets,
                            NSRange range) {
  for (NSUInteger i = 0; i < range.length; i++) {
    if (range.location > (NSUInteger)-1 - i)
      sm__fatal("-[MTLArgumentEncoder %s]: range overflows", sel_getName(cmd));
    set_buffer((sm_argenc *)self, sel_getName(cmd), buffers[i], offsets[i], range.location + i);
  }
}
static void *enc_constant_data(id self, SEL cmd, NSUInteger index) {
  sm_argenc *e = (sm_argenc *)self;
  uint32_t elem;
  const struct sm_argbuf_member *m = member_at(e, sel_getName(cmd), index, &elem);
  if (m->pointer)
    sm__fatal("-[MTLArgumentEncoder %s]: index %lu is a buffer pointer, not data (use "
              "setBuffer:offset:atIndex:)",
              sel_getName(cmd), index);
  return slot(e, sel_getName(cmd), m, elem);
}

static id dev_new_encoder_args(id self, SEL cmd, id arguments) {
  (void)self, (void)arguments;
  sm__fatal("-[MTLDevice %s]: not supported by softmetal: make the encoder from the kernel "
            "with -[MTLFunction newArgumentEncoderWithBufferIndex:]",
            sel_getName(cmd));
}

const sm_method_def sm__function_argenc_methods[] = {
    SM_METHOD("newArgumentEncoderWithBufferIndex:", fn_new_encoder, "@@:Q"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__device_argenc_methods[] = {
    SM_METHOD("newArgumentEncoderWithArguments:", dev_new_encoder_args, "@@:@"),
    {NULL, NULL, NULL},
};

static const sm_method_def argenc_methods[] = {
    SM_METHOD("encodedLength", enc_length, "Q@:"),
    SM_METHOD("alignment", enc_alignment, "Q@:"),
    SM_METHOD("device", enc_device, "@@:"),
    SM_METHOD("setArgumentBuffer:offset:", enc_set_arg_buffer, "v@:@Q"),
    SM_METHOD("setArgumentBuffer:startOffset:arrayElement:", enc_set_arg_buffer_elem, "v@:@QQ"),
    SM_METHOD("setBuffer:offset:atIndex:", enc_set_buffer, "v@:@QQ"),
    SM_METHOD("setBuffers:offsets:withRange:", enc_set_buffers, "v@:^@^Q{_NSRange=QQ}"),
    SM_METHOD("constantDataAtIndex:", enc_constant_data, "^v@:Q"),
    {NULL, NULL, NULL},
};

void sm__register_argenc(void) { SM_CLASS_DEFINE(&argenc_class, Nil, argenc_methods); }
