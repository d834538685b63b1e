/* SPDX-License-Identifier: MIT */
/* softmetal's <Foundation/Foundation.h>: the Foundation classes softmetal
 * answers, declared from Apple's public API (selector names, types and
 * constants as Apple documents them) for clang's GNU runtime
 * (-fobjc-runtime=gcc, manual reference counting). Only what softmetal
 * implements is declared; a selector missing here is missing there. */
#ifndef SOFTMETAL_FOUNDATION_H
#define SOFTMETAL_FOUNDATION_H
#include <objc/objc.h>
#include <TargetConditionals.h>
/* What Apple's Foundation brings in through CoreFoundation and the
 * system headers, and programs rely on: the C library, blocks' Block_copy
 * and Block_release, and Mach's virtual memory calls. */
#include <Block.h>
#include <assert.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <mach/mach.h>

#if !defined(__OBJC__) || !__has_feature(blocks)
#error "<Foundation/Foundation.h> is for Objective-C with blocks: clang -fobjc-runtime=gcc -fblocks"
#endif

typedef long NSInteger;
typedef unsigned long NSUInteger;
#define NSIntegerMax __LONG_MAX__
#define NSUIntegerMax (__LONG_MAX__ * 2UL + 1UL)
#define NSNotFound NSIntegerMax
typedef double NSTimeInterval;
typedef unsigned long NSStringEncoding;

#ifndef NS_ENUM
#define NS_ENUM(type, name)                                                                        \
  enum name : type name;                                                                           \
  enum name : type
#define NS_OPTIONS(type, name)                                                                     \
  enum name : type name;                                                                           \
  enum name : type
#endif
#ifndef API_AVAILABLE
#define API_AVAILABLE(...)
#define API_UNAVAILABLE(...)
#define API_DEPRECATED(...)
#endif
#ifndef NS_RETURNS_RETAINED
#define NS_RETURNS_RETAINED __attribute__((ns_returns_retained))
#endif
#ifndef NS_FORMAT_FUNCTION
#define NS_FORMAT_FUNCTION(f, a) __attribute__((format(__NSString__, f, a)))
#endif

typedef struct _NSRange {
  NSUInteger location;
  NSUInteger length;
} NSRange;
static inline NSRange NSMakeRange(NSUInteger location, NSUInteger length) {
  NSRange r = {location, length};
  return r;
}

typedef struct {
  NSInteger majorVersion;
  NSInteger minorVersion;
  NSInteger patchVersion;
} NSOperatingSystemVersion;

enum { NSASCIIStringEncoding = 1, NSUTF8StringEncoding = 4 };

@class NSString, NSArray, NSDictionary, NSError, NSURL, Protocol;

@protocol NSObject
- (id)retain;
- (oneway void)release;
- (id)autorelease;
- (NSUInteger)retainCount;
- (Class)class;
- (Class)superclass;
- (id)self;
- (BOOL)isKindOfClass:(Class)cls;
- (BOOL)isMemberOfClass:(Class)cls;
- (BOOL)conformsToProtocol:(Protocol *)protocol;
- (BOOL)respondsToSelector:(SEL)selector;
- (BOOL)isEqual:(id)object;
- (NSUInteger)hash;
- (NSString *)description;
- (NSString *)debugDescription;
@end

/* The instance variables are softmetal's root class's: a subclass lays its
 * own after them (GNU runtime, fixed layout). */
@interface NSObject <NSObject> {
  Class isa;
  void *_sm_cls;
  long _sm_rc;
  id _sm_label;
  void *_sm_host;
}
+ (instancetype)alloc;
+ (instancetype)new;
+ (Class)class;
+ (Class)superclass;
+ (BOOL)instancesRespondToSelector:(SEL)selector;
+ (BOOL)isSubclassOfClass:(Class)cls;
+ (NSString *)description;
- (instancetype)init;
- (void)dealloc;
- (id)copy;
- (id)mutableCopy;
@end

typedef struct {
  unsigned long state;
  id __unsafe_unretained *itemsPtr;
  unsigned long *mutationsPtr;
  unsigned long extra[5];
} NSFastEnumerationState;
@protocol NSFastEnumeration
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState *)state
                                  objects:(id __unsafe_unretained[])buffer
                                    count:(NSUInteger)len;
@end
@protocol NSCopying
- (id)copy;
@end

@interface NSString : NSObject <NSCopying>
+ (instancetype)stringWithUTF8String:(const char *)s;
+ (instancetype)stringWithCString:(const char *)s encoding:(NSStringEncoding)encoding;
+ (instancetype)stringWithFormat:(NSString *)format, ... NS_FORMAT_FUNCTION(1, 2);
+ (instancetype)stringWithString:(NSString *)s;
+ (instancetype)stringWithContentsOfFile:(NSString *)path
                                encoding:(NSStringEncoding)encoding
                                   error:(NSError **)error;
+ (NSString *)pathWithComponents:(NSArray *)components;
- (instancetype)initWithUTF8String:(const char *)s;
- (instancetype)initWithBytes:(const void *)bytes
                       length:(NSUInteger)length
                     encoding:(NSStringEncoding)encoding;
- (instancetype)initWithFormat:(NSString *)format, ... NS_FORMAT_FUNCTION(1, 2);
- (const char *)UTF8String;
- (const char *)cStringUsingEncoding:(NSStringEncoding)encoding;
- (const char *)fileSystemRepresentation;
- (NSUInteger)length;
- (BOOL)isEqualToString:(NSString *)s;
- (BOOL)containsString:(NSString *)s;
- (BOOL)hasPrefix:(NSString *)s;
- (BOOL)hasSuffix:(NSString *)s;
- (NSString *)substringToIndex:(NSUInteger)i;
- (NSString *)substringFromIndex:(NSUInteger)i;
- (NSString *)stringByAppendingString:(NSString *)s;
- (NSString *)stringByAppendingPathComponent:(NSString *)s;
- (NSString *)stringByDeletingLastPathComponent;
- (NSString *)lastPathComponent;
@end

@interface NSArray<ObjectType> : NSObject <NSFastEnumeration, NSCopying>
+ (instancetype)array;
+ (instancetype)arrayWithObject:(ObjectType)object;
+ (instancetype)arrayWithObjects:(const ObjectType[])objects count:(NSUInteger)count;
- (NSUInteger)count;
- (ObjectType)objectAtIndex:(NSUInteger)index;
- (ObjectType)objectAtIndexedSubscript:(NSUInteger)index;
- (ObjectType)firstObject;
- (ObjectType)lastObject;
- (BOOL)containsObject:(ObjectType)object;
@end
@interface NSMutableArray<ObjectType> : NSArray <ObjectType>
+ (instancetype)arrayWithCapacity:(NSUInteger)capacity;
- (instancetype)initWithCapacity:(NSUInteger)capacity;
- (void)addObject:(ObjectType)object;
- (void)removeObject:(ObjectType)object;
- (void)removeObjectAtIndex:(NSUInteger)index;
- (void)removeLastObject;
- (void)removeAllObjects;
@end

@interface NSDictionary<KeyType, ObjectType> : NSObject <NSFastEnumeration, NSCopying>
+ (instancetype)dictionary;
+ (instancetype)dictionaryWithObject:(ObjectType)object forKey:(KeyType)key;
+ (instancetype)dictionaryWithObjects:(const ObjectType[])objects
                              forKeys:(const KeyType[])keys
                                count:(NSUInteger)count;
- (NSUInteger)count;
- (ObjectType)objectForKey:(KeyType)key;
- (ObjectType)objectForKeyedSubscript:(KeyType)key;
- (NSArray<KeyType> *)allKeys;
- (NSArray<ObjectType> *)allValues;
@end
@interface NSMutableDictionary<KeyType, ObjectType> : NSDictionary <KeyType, ObjectType>
+ (instancetype)dictionaryWithCapacity:(NSUInteger)capacity;
- (instancetype)initWithCapacity:(NSUInteger)capacity;
- (void)setObject:(ObjectType)object forKey:(KeyType)key;
- (void)setObject:(ObjectType)object forKeyedSubscript:(KeyType)key;
- (void)removeObjectForKey:(KeyType)key;
- (void)removeAllObjects;
@end

@interface NSNumber : NSObject <NSCopying>
+ (NSNumber *)numberWithInt:(int)value;
+ (NSNumber *)numberWithUnsignedInt:(unsigned int)value;
+ (NSNumber *)numberWithLong:(long)value;
+ (NSNumber *)numberWithUnsignedLong:(unsigned long)value;
+ (NSNumber *)numberWithLongLong:(long long)value;
+ (NSNumber *)numberWithUnsignedLongLong:(unsigned long long)value;
+ (NSNumber *)numberWithInteger:(NSInteger)value;
+ (NSNumber *)numberWithUnsignedInteger:(NSUInteger)value;
+ (NSNumber *)numberWithFloat:(float)value;
+ (NSNumber *)numberWithDouble:(double)value;
+ (NSNumber *)numberWithBool:(BOOL)value;
- (int)intValue;
- (unsigned int)unsignedIntValue;
- (long)longValue;
- (unsigned long)unsignedLongValue;
- (long long)longLongValue;
- (unsigned long long)unsignedLongLongValue;
- (NSInteger)integerValue;
- (NSUInteger)unsignedIntegerValue;
- (float)floatValue;
- (double)doubleValue;
- (BOOL)boolValue;
- (BOOL)isEqualToNumber:(NSNumber *)number;
- (NSString *)stringValue;
@end

typedef NSString *NSErrorDomain;
extern NSErrorDomain NSCocoaErrorDomain;
extern NSErrorDomain NSPOSIXErrorDomain;
@interface NSError : NSObject
- (NSErrorDomain)domain;
- (NSInteger)code;
- (NSString *)localizedDescription;
- (NSDictionary *)userInfo;
@end

@interface NSURL : NSObject <NSCopying>
+ (NSURL *)fileURLWithPath:(NSString *)path;
- (NSString *)path;
@end

@protocol NSLocking
- (void)lock;
- (void)unlock;
@end
@interface NSLock : NSObject <NSLocking>
- (BOOL)tryLock;
@end

@interface NSAutoreleasePool : NSObject
- (void)drain;
@end

@interface NSProcessInfo : NSObject
+ (NSProcessInfo *)processInfo;
@property(readonly, copy) NSDictionary<NSString *, NSString *> *environment;
@property(readonly, copy) NSArray<NSString *> *arguments;
@property(readonly, copy) NSString *processName;
@property(readonly) int processIdentifier;
@property(readonly) NSOperatingSystemVersion operatingSystemVersion;
@property(readonly, copy) NSString *operatingSystemVersionString;
@property(readonly) NSUInteger processorCount;
@property(readonly) NSUInteger activeProcessorCount;
@property(readonly) unsigned long long physicalMemory;
- (BOOL)isOperatingSystemAtLeastVersion:(NSOperatingSystemVersion)version;
@end

@interface NSBundle : NSObject
+ (NSBundle *)mainBundle;
+ (NSBundle *)bundleForClass:(Class)cls;
+ (NSArray<NSBundle *> *)allBundles;
+ (NSArray<NSBundle *> *)allFrameworks;
- (instancetype)initWithPath:(NSString *)path;
@property(readonly, copy) NSString *bundlePath;
@property(readonly, copy) NSString *resourcePath;
@property(readonly, copy) NSString *executablePath;
@property(readonly, copy) NSString *bundleIdentifier;
@property(readonly, copy) NSURL *bundleURL;
@property(readonly, copy) NSURL *resourceURL;
- (NSString *)pathForResource:(NSString *)name ofType:(NSString *)ext;
- (NSURL *)URLForResource:(NSString *)name withExtension:(NSString *)ext;
@end

typedef NSString *NSFileAttributeKey;
typedef NSString *NSFileAttributeType;
extern NSFileAttributeKey NSFileType;
extern NSFileAttributeKey NSFileSize;
extern NSFileAttributeType NSFileTypeDirectory;
extern NSFileAttributeType NSFileTypeRegular;
extern NSFileAttributeType NSFileTypeSymbolicLink;
extern NSFileAttributeType NSFileTypeUnknown;
@interface NSFileManager : NSObject
+ (NSFileManager *)defaultManager;
- (BOOL)fileExistsAtPath:(NSString *)path;
- (BOOL)isReadableFileAtPath:(NSString *)path;
- (NSDictionary<NSFileAttributeKey, id> *)attributesOfItemAtPath:(NSString *)path
                                                           error:(NSError **)error;
- (NSString *)destinationOfSymbolicLinkAtPath:(NSString *)path error:(NSError **)error;
@end

#ifdef __cplusplus
extern "C" {
#endif
void NSLog(NSString *format, ...) NS_FORMAT_FUNCTION(1, 2);
#ifdef __cplusplus
}
#endif

#endif
