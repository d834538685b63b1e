/* SPDX-License-Identifier: MIT */
/* softmetal's <objc/runtime.h>: the GNU libobjc functions a host program
 * most often calls (softmetal's classes are GNU libobjc classes). */
#ifndef SOFTMETAL_OBJC_RUNTIME_H
#define SOFTMETAL_OBJC_RUNTIME_H
#include <objc/objc.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
Class objc_getClass(const char *name);
Class objc_lookUpClass(const char *name);
Class object_getClass(id object);
const char *object_getClassName(id object);
const char *class_getName(Class cls);
Class class_getSuperclass(Class cls);
BOOL class_respondsToSelector(Class cls, SEL selector);
size_t class_getInstanceSize(Class cls);
SEL sel_registerName(const char *name);
SEL sel_getUid(const char *name);
const char *sel_getName(SEL selector);
BOOL sel_isEqual(SEL a, SEL b);
IMP class_getMethodImplementation(Class cls, SEL selector);
#ifdef __cplusplus
}
#endif
#endif
