/* SPDX-License-Identifier: MIT */
/* softmetal's <mach/mach.h>: the Mach virtual memory calls a Mac host
 * program allocates page-aligned memory with (vm_allocate, vm_deallocate on
 * mach_task_self()), answered by libsoftmetal with anonymous mappings:
 * page-aligned and zero-filled, as Mach gives them. Nothing else of Mach. */
#ifndef SOFTMETAL_MACH_MACH_H
#define SOFTMETAL_MACH_MACH_H
#include <stdint.h>

typedef int kern_return_t;
typedef unsigned int mach_port_t;
typedef mach_port_t vm_map_t;
typedef uintptr_t vm_address_t;
typedef uintptr_t vm_offset_t;
typedef uintptr_t vm_size_t;

#define KERN_SUCCESS 0
#define KERN_INVALID_ADDRESS 1
#define KERN_INVALID_ARGUMENT 4
#define KERN_NO_SPACE 3
#define KERN_RESOURCE_SHORTAGE 6
#define VM_FLAGS_FIXED 0x0000
#define VM_FLAGS_ANYWHERE 0x0001

#ifdef __cplusplus
extern "C" {
#endif
mach_port_t mach_task_self(void);
/* Maps size bytes (rounded up to whole pages) anywhere; VM_FLAGS_ANYWHERE
 * only. KERN_INVALID_ARGUMENT for other flags or a null address pointer,
 * KERN_RESOURCE_SHORTAGE when the mapping fails. */
kern_return_t vm_allocate(vm_map_t task, vm_address_t *address, vm_size_t size, int flags);
kern_return_t vm_deallocate(vm_map_t task, vm_address_t address, vm_size_t size);
#ifdef __cplusplus
}
#endif
#endif
