/* SPDX-License-Identifier: MIT */
/* The classes whose methods several files implement, each defined once here
 * from the tables of every file that has some of its methods (see
 * sm_internal.h). What such a class answers is this file's list, whatever
 * order the files register in. */
#include "sm_internal.h"

void sm__register_classes(void) {
  SM_CLASS_DEFINE(sm__device_k, Nil, sm__device_metal_methods, sm__device_msl_methods,
                  sm__device_archive_methods, sm__device_reflect_methods, sm__device_heap_methods,
                  sm__device_argenc_methods, sm__device_host_methods);
  SM_CLASS_DEFINE(sm__buffer_k, Nil, sm__buffer_metal_methods, sm__buffer_heap_methods);
  SM_CLASS_DEFINE(sm__shared_event_k, Nil, sm__shared_event_metal_methods,
                  sm__shared_event_host_methods);
  SM_CLASS_DEFINE(sm__queue_k, Nil, sm__queue_metal_methods, sm__queue_host_methods);
  SM_CLASS_DEFINE(sm__cmdbuf_k, Nil, sm__cmdbuf_metal_methods, sm__cmdbuf_host_methods);
  SM_CLASS_DEFINE(sm__blit_k, Nil, sm__blit_metal_methods, sm__encoder_host_methods);
  SM_CLASS_DEFINE(sm__compute_k, Nil, sm__compute_metal_methods, sm__encoder_host_methods,
                  sm__compute_host_methods);
  const sm_method_def *math = sm__options_math_methods();
  if (math)
    SM_CLASS_DEFINE(sm__options_k, Nil, sm__options_msl_methods, math, sm__options_host_methods);
  else
    SM_CLASS_DEFINE(sm__options_k, Nil, sm__options_msl_methods, sm__options_host_methods);
  SM_CLASS_DEFINE(sm__library_k, Nil, sm__library_msl_methods, sm__library_host_methods);
  SM_CLASS_DEFINE(sm__function_k, Nil, sm__function_msl_methods, sm__function_argenc_methods);
}
