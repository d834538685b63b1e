// SPDX-License-Identifier: MIT
// Mach's virtual memory calls of <mach/mach.h> (include/mach/mach.h): a Mac
// host program allocates its page-aligned, zero-filled memory with them.
// Anonymous private mappings of whole pages of the process's page size.
#define _GNU_SOURCE /* MAP_ANONYMOUS */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "include/mach/mach.h"

#define SM_EXPORT __attribute__((visibility("default")))

SM_EXPORT mach_port_t mach_task_self(void) { return 1; }

static int page_round(vm_size_t size, vm_size_t *out) {
  vm_size_t page = (vm_size_t)sysconf(_SC_PAGESIZE);
  if (size > UINTPTR_MAX - (page - 1)) return 0;
  *out = (size + page - 1) / page * page;
  return 1;
}

SM_EXPORT kern_return_t vm_allocate(vm_map_t task, vm_address_t *address, vm_size_t size,
                                    int flags) {
  vm_size_t len;
  (void)task;
  if (!address || flags != VM_FLAGS_ANYWHERE) return KERN_INVALID_ARGUMENT;
  if (size == 0) {
    *address = 0;
    return KERN_SUCCESS;
  }
  if (!page_round(size, &len)) return KERN_NO_SPACE;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return KERN_RESOURCE_SHORTAGE;
  *address = (vm_address_t)p;
  return KERN_SUCCESS;
}

SM_EXPORT kern_return_t vm_deallocate(vm_map_t task, vm_address_t address, vm_size_t size) {
  vm_size_t len;
  (void)task;
  if (size == 0) return KERN_SUCCESS;
  vm_size_t page = (vm_size_t)sysconf(_SC_PAGESIZE);
  if (address % page || !page_round(size, &len)) return KERN_INVALID_ADDRESS;
  return munmap((void *)address, len) == 0 ? KERN_SUCCESS : KERN_INVALID_ADDRESS;
}
