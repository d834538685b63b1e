# SPDX-License-Identifier: MIT
"""DLPack interop between cmetal and real peers (NumPy, PyTorch, JAX, CuPy),
through ctypes only: no compiled extension.

Usage: python3 dlpack_interop.py [path/to/libcmetal.so]
       (or CMETAL_LIB=path/to/libcmetal.so)

Both directions, over PyCapsules as the Python protocol defines them:
  peer -> cmetal: x.__dlpack__(max_version=(1, 0)) when the peer takes it
                  ("dltensor_versioned"), else x.__dlpack__() ("dltensor");
                  cmetal imports the struct and renames the capsule "used_*".
  cmetal -> peer: an object with __dlpack__/__dlpack_device__ over a cmetal
                  tensor; it answers max_version with the versioned struct.
Zero-copy is proven by writing on one side and reading on the other, and
lifetimes by dropping both sides in both orders while counting deleter
calls (each deleter is wrapped by a counting one).

Exit status: 0 when every check passed, 1 on a failure, 77 (ctest's skip)
when no peer is installed.
"""

import ctypes
import gc
import os
import sys
import weakref

SKIP = 77

# ---------------------------------------------------------------- the ABI


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
DELETER_LEGACY = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DELETER_VERSIONED = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))

# cmetal's public structs (include/cmetal/*.h)
CM_MAX_NDIM = 16
CM_COPY_IF_NEEDED, CM_COPY_NEVER, CM_COPY_ALWAYS = 0, 1, 2
CM_TENSOR_READ_ONLY = 1
CM_DEVICE_CPU = 1
CM_ERR_READ_ONLY = 6
CM_DTYPES = {"bool": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint8": 6,
             "uint16": 7, "uint32": 8, "uint64": 9, "float16": 10, "bfloat16": 11,
             "float32": 12, "float64": 13}
CM_DTYPE_NAMES = {v: k for k, v in CM_DTYPES.items()}


class ExportDesc(ctypes.Structure):
    _fields_ = [("max_version", DLPackVersion), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("copy", ctypes.c_int), ("read_only", ctypes.c_bool)]


class Managed(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("legacy", ctypes.POINTER(DLManagedTensor)),
                ("versioned", ctypes.POINTER(DLManagedTensorVersioned)), ("copied", ctypes.c_bool)]


class ImportDesc(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("copy", ctypes.c_int), ("read_only", ctypes.c_bool)]


class TensorDesc(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("storage", ctypes.c_int)]


class TensorInfo(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * CM_MAX_NDIM), ("strides", ctypes.c_int64 * CM_MAX_NDIM),
                ("byte_offset", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("numel", ctypes.c_int64),
                ("contiguous", ctypes.c_bool), ("extent_begin", ctypes.c_uint64),
                ("extent_end", ctypes.c_uint64), ("buffer", ctypes.c_void_p), ("device_type", ctypes.c_int)]


# ---------------------------------------------------------------- capsules

_api = ctypes.pythonapi
PyCapsule_New = _api.PyCapsule_New
PyCapsule_New.restype = ctypes.py_object
PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
PyCapsule_GetPointer = _api.PyCapsule_GetPointer
PyCapsule_GetPointer.restype = ctypes.c_void_p
PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
PyCapsule_GetName = _api.PyCapsule_GetName
PyCapsule_GetName.restype = ctypes.c_char_p
PyCapsule_GetName.argtypes = [ctypes.py_object]
PyCapsule_SetName = _api.PyCapsule_SetName
PyCapsule_SetName.restype = ctypes.c_int
PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# In a capsule destructor the capsule is dying: it must be passed as a raw
# pointer, never as a Python object (that would resurrect it).
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

# Capsule names must outlive their capsules: module-level constants.
NAME_LEGACY = b"dltensor"
NAME_VERSIONED = b"dltensor_versioned"
NAME_USED_LEGACY = b"used_dltensor"
NAME_USED_VERSIONED = b"used_dltensor_versioned"


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    """Deletes a managed tensor nobody consumed (the name is still unused)."""
    if _raw_is_valid(capsule, NAME_LEGACY):
        p = ctypes.cast(_raw_get_pointer(capsule, NAME_LEGACY), ctypes.POINTER(DLManagedTensor))
        if p.contents.deleter:
            DELETER_LEGACY(p.contents.deleter)(p)
    elif _raw_is_valid(capsule, NAME_VERSIONED):
        p = ctypes.cast(_raw_get_pointer(capsule, NAME_VERSIONED),
                        ctypes.POINTER(DLManagedTensorVersioned))
        if p.contents.deleter:
            DELETER_VERSIONED(p.contents.deleter)(p)


_DESTRUCTOR_ADDRESS = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


class DeleterSpy:
    """Replaces a managed tensor's deleter by one that counts its calls and
    then calls the original."""
    _alive = []  # callbacks must outlive every call

    def __init__(self, managed_ptr, versioned):
        self.calls = 0
        fn_type = DELETER_VERSIONED if versioned else DELETER_LEGACY
        m = managed_ptr.contents
        self._original = fn_type(m.deleter) if m.deleter else None
        self._callback = fn_type(self._call)
        m.deleter = ctypes.cast(self._callback, ctypes.c_void_p).value
        DeleterSpy._alive.append(self)

    def _call(self, self_ptr):
        self.calls += 1
        if self._original is not None:
            self._original(self_ptr)


# ---------------------------------------------------------------- cmetal


class Cmetal:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        self.lib = lib
        P, V = ctypes.POINTER, ctypes.c_void_p
        lib.cm_last_error.restype = ctypes.c_char_p
        lib.cm_status_name.restype = ctypes.c_char_p
        lib.cm_status_name.argtypes = [ctypes.c_int]
        for name, args in {
            "cm_device_open": [ctypes.c_int, ctypes.c_uint32, P(V)],
            "cm_device_release": [V],
            "cm_tensor_create": [V, P(TensorDesc), P(V)],
            "cm_tensor_release": [V],
            "cm_tensor_get_info": [V, P(TensorInfo)],
            "cm_tensor_get_element": [V, P(ctypes.c_int64), ctypes.c_int, V],
            "cm_tensor_set_element": [V, P(ctypes.c_int64), ctypes.c_int, V],
            "cm_tensor_transpose": [V, ctypes.c_int32, ctypes.c_int32, P(V)],
            "cm_tensor_slice": [V, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, P(V)],
            "cm_dlpack_export": [V, P(ExportDesc), P(Managed)],
            "cm_dlpack_import": [P(DLManagedTensor), P(ImportDesc), P(V)],
            "cm_dlpack_import_versioned": [P(DLManagedTensorVersioned), P(ImportDesc), P(V)],
        }.items():
            getattr(lib, name).argtypes = args
            getattr(lib, name).restype = ctypes.c_int
        self.cpu = V()
        self.check(lib.cm_device_open(CM_DEVICE_CPU, 0, ctypes.byref(self.cpu)))

    def check(self, status):
        if status != 0:
            raise RuntimeError("%s: %s" % (self.lib.cm_status_name(status).decode(),
                                           self.lib.cm_last_error().decode()))

    def error(self):
        return self.lib.cm_last_error().decode()

    def create(self, dtype, shape):
        arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        desc = TensorDesc(dtype=CM_DTYPES[dtype], ndim=len(shape), shape=arr)
        t = ctypes.c_void_p()
        self.check(self.lib.cm_tensor_create(self.cpu, ctypes.byref(desc), ctypes.byref(t)))
        return t

    def info(self, t):
        i = TensorInfo()
        self.check(self.lib.cm_tensor_get_info(t, ctypes.byref(i)))
        return i

    _ctype = {"bool": ctypes.c_bool, "int8": ctypes.c_int8, "int16": ctypes.c_int16,
              "int32": ctypes.c_int32, "int64": ctypes.c_int64, "uint8": ctypes.c_uint8,
              "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64,
              "float16": ctypes.c_uint16, "bfloat16": ctypes.c_uint16,
              "float32": ctypes.c_float, "float64": ctypes.c_double}

    def get(self, t, index, dtype):
        v = self._ctype[dtype]()
        idx = (ctypes.c_int64 * max(len(index), 1))(*index)
        self.check(self.lib.cm_tensor_get_element(t, idx, CM_DTYPES[dtype], ctypes.byref(v)))
        return v.value

    def set(self, t, index, dtype, value):
        v = self._ctype[dtype](value)
        idx = (ctypes.c_int64 * max(len(index), 1))(*index)
        return self.lib.cm_tensor_set_element(t, idx, CM_DTYPES[dtype], ctypes.byref(v))

    def release(self, t):
        self.lib.cm_tensor_release(t)

    # -- peer -> cmetal
    def import_from(self, x, desc=None, versioned_ok=True):
        """Imports any __dlpack__ object; returns (tensor, spy, protocol)."""
        capsule = None
        if versioned_ok:
            try:
                capsule = x.__dlpack__(max_version=(1, 0))
            except TypeError:
                capsule = None  # a peer from before DLPack 1.0
        if capsule is None:
            capsule = x.__dlpack__()
        name = PyCapsule_GetName(capsule)
        out = ctypes.c_void_p()
        if name == NAME_VERSIONED:
            p = ctypes.cast(PyCapsule_GetPointer(capsule, name), ctypes.POINTER(DLManagedTensorVersioned))
            spy = DeleterSpy(p, versioned=True)
            # Read before the import: a copying import may run the deleter,
            # after which the struct is gone.
            protocol = "versioned %d.%d" % (p.contents.version.major, p.contents.version.minor)
            status = self.lib.cm_dlpack_import_versioned(p, desc, ctypes.byref(out))
            used = NAME_USED_VERSIONED
        elif name == NAME_LEGACY:
            p = ctypes.cast(PyCapsule_GetPointer(capsule, name), ctypes.POINTER(DLManagedTensor))
            spy = DeleterSpy(p, versioned=False)
            status = self.lib.cm_dlpack_import(p, desc, ctypes.byref(out))
            used, protocol = NAME_USED_LEGACY, "legacy"
        else:
            raise AssertionError("unexpected capsule name %r" % name)
        if status != 0:
            # cmetal called nothing; the capsule still owns the managed
            # tensor and its destructor deletes it (through the spied
            # pointer, or, in some peers, by calling its own deleter).
            message, calls = self.error(), spy.calls
            del capsule, p
            gc.collect()
            raise ImportFailed(message, spy, calls)
        PyCapsule_SetName(capsule, used)
        return out, spy, protocol


class ImportFailed(Exception):
    def __init__(self, message, spy, calls_at_failure):
        super().__init__(message)
        self.spy = spy
        self.calls_at_failure = calls_at_failure  # deleter calls made by cmetal: must be 0


class CmArray:
    """A cmetal tensor seen through the DLPack Python protocol."""

    def __init__(self, cm, tensor, owned=True):
        self.cm, self.tensor, self.owned = cm, tensor, owned
        self.spies = []
        self.requests = []

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        desc = ExportDesc()
        if max_version is not None and max_version[0] >= 1:
            desc.max_version = DLPackVersion(max_version[0], max_version[1])
        if dl_device is not None:
            desc.device_type, desc.device_id = dl_device
        desc.copy = {None: CM_COPY_IF_NEEDED, False: CM_COPY_NEVER, True: CM_COPY_ALWAYS}[copy]
        out = Managed()
        status = self.cm.lib.cm_dlpack_export(self.tensor, ctypes.byref(desc), ctypes.byref(out))
        if status != 0:
            raise BufferError(self.cm.error())
        self.requests.append(max_version)
        if out.versioned:
            self.spies.append(DeleterSpy(out.versioned, versioned=True))
            return PyCapsule_New(ctypes.cast(out.versioned, ctypes.c_void_p), NAME_VERSIONED,
                                 _DESTRUCTOR_ADDRESS)
        self.spies.append(DeleterSpy(out.legacy, versioned=False))
        return PyCapsule_New(ctypes.cast(out.legacy, ctypes.c_void_p), NAME_LEGACY,
                             _DESTRUCTOR_ADDRESS)

    def release(self):
        if self.owned and self.tensor:
            self.cm.release(self.tensor)
            self.tensor = None


# ---------------------------------------------------------------- runner


class Runner:
    def __init__(self):
        self.passed = 0
        self.failed = []
        self.notes = []

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed.append(what)
            print("  FAIL:", what)

    def run(self, name, fn, *args):
        print("--", name)
        before = len(self.failed)
        try:
            fn(self, *args)
        except Exception as e:  # a crash of one case must not hide the others
            import traceback
            traceback.print_exc()
            self.failed.append("%s raised %r" % (name, e))
        gc.collect()
        if len(self.failed) == before:
            print("   ok")


def fill(cm, t, dtype, values):
    """Writes values (row-major over the tensor's shape) through cmetal."""
    info = cm.info(t)
    shape = list(info.shape[:info.ndim])
    for flat, v in enumerate(values):
        idx, rest = [], flat
        for s in reversed(shape):
            idx.append(rest % s)
            rest //= s
        cm.check(cm.set(t, list(reversed(idx)), dtype, v))


def cm_values(cm, t, dtype):
    info = cm.info(t)
    shape = list(info.shape[:info.ndim])
    n = 1
    for s in shape:
        n *= s
    out = []
    for flat in range(n):
        idx, rest = [], flat
        for s in reversed(shape):
            idx.append(rest % s)
            rest //= s
        out.append(cm.get(t, list(reversed(idx)), dtype))
    return out


# ---------------------------------------------------------------- NumPy


def numpy_cases(r, cm, np):
    def dl(x):  # the NumPy name for a dtype
        return str(x.dtype)

    def peer_to_cmetal(r):
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        w = weakref.ref(a)
        t, spy, proto = cm.import_from(a)
        r.notes.append("numpy %s -> cmetal: %s" % (np.__version__, proto))
        i = cm.info(t)
        r.check(CM_DTYPE_NAMES[i.dtype] == "float32" and list(i.shape[:2]) == [3, 4], "shape/dtype")
        r.check(cm.get(t, [2, 3], "float32") == 11.0, "read through cmetal")
        a[1, 2] = -5.0
        r.check(cm.get(t, [1, 2], "float32") == -5.0, "numpy write seen by cmetal (zero-copy)")
        r.check(cm.set(t, [0, 1], "float32", 42.0) == 0, "cmetal write")
        r.check(a[0, 1] == 42.0, "cmetal write seen by numpy (zero-copy)")
        del a
        gc.collect()
        r.check(w() is not None, "the import keeps the numpy array alive")
        r.check(spy.calls == 0, "no delete while cmetal holds it")
        cm.release(t)
        gc.collect()
        r.check(spy.calls == 1, "numpy's deleter ran exactly once (%d)" % spy.calls)
        r.check(w() is None, "numpy array freed after the last cmetal release")

    def peer_dropped_first_and_last(r):
        a = np.arange(5, dtype=np.int64)
        t, spy, _ = cm.import_from(a)
        cm.release(t)  # cmetal first, array still held by Python
        r.check(spy.calls == 1 and a[4] == 4, "deleter once; array intact")

    def non_contiguous_and_negative(r):
        base = np.arange(24, dtype=np.float64).reshape(4, 6)
        cases = {"step": base[::2, 1::2], "transpose": base.T, "reversed": base[::-1, ::-2],
                 "broadcast": np.broadcast_to(np.arange(3.0), (4, 3))}
        for name, v in cases.items():
            try:
                t, spy, _ = cm.import_from(v)
            except BufferError as e:  # NumPy refuses read-only arrays under the legacy protocol
                r.notes.append("numpy refuses to export %s: %s" % (name, e))
                continue
            got = cm_values(cm, t, "float64")
            r.check(got == [float(x) for x in np.ravel(v)], "%s view values" % name)
            i = cm.info(t)
            r.check(list(i.strides[:2]) == [s // 8 for s in v.strides], "%s strides" % name)
            cm.release(t)
            r.check(spy.calls == 1, "%s deleter once" % name)
        rev = base[::-1, ::-2]
        t, spy, _ = cm.import_from(rev)
        r.check(cm.set(t, [0, 0], "float64", -1.0) == 0 and base[3, 5] == -1.0,
                "negative-stride write lands at the right address")
        cm.release(t)

    def zero_d_and_zero_size(r):
        s = np.array(3.5)
        t, spy, _ = cm.import_from(s)
        r.check(cm.info(t).ndim == 0 and cm.get(t, [], "float64") == 3.5, "0-d import")
        cm.release(t)
        z = np.zeros((0, 3), dtype=np.float32)
        t, spy2, _ = cm.import_from(z)
        r.check(cm.info(t).numel == 0, "zero-size import")
        cm.release(t)
        r.check(spy.calls == 1 and spy2.calls == 1, "deleters once")

    def dtypes_in(r):
        for dt in ["int8", "uint16", "int32", "float16", "float64", "bool"]:
            a = np.arange(4).astype(dt)
            try:
                t, spy, _ = cm.import_from(a)
            except BufferError as e:
                r.notes.append("numpy %s cannot export %s: %s" % (np.__version__, dt, e))
                continue
            r.check(CM_DTYPE_NAMES[cm.info(t).dtype] == dl(a), "dtype %s" % dt)
            cm.release(t)

    def read_only_in(r):
        a = np.arange(4.0)
        a.flags.writeable = False
        try:
            t, spy, proto = cm.import_from(a)
        except BufferError as e:
            r.notes.append("numpy %s refuses read-only exports: %s" % (np.__version__, e))
            return
        r.check(cm.info(t).flags & CM_TENSOR_READ_ONLY, "read-only array imports read-only (%s)" % proto)
        r.check(cm.set(t, [0], "float64", 1.0) == CM_ERR_READ_ONLY, "cmetal refuses the write")
        cm.release(t)

    def cmetal_to_peer(r):
        t = cm.create("float32", [3, 4])
        fill(cm, t, "float32", range(12))
        src = CmArray(cm, t)
        a = np.from_dlpack(src)
        proto = "versioned" if src.requests[-1] is not None else "legacy"
        r.notes.append("cmetal -> numpy %s: %s" % (np.__version__, proto))
        r.check(a.shape == (3, 4) and a.dtype == np.float32, "numpy sees shape and dtype")
        r.check(a.tolist() == [[float(4 * i + j) for j in range(4)] for i in range(3)], "values")
        cm.check(cm.set(t, [2, 1], "float32", 99.0))
        r.check(a[2, 1] == 99.0, "cmetal write seen by numpy (zero-copy)")
        src.release()  # cmetal's reference first: numpy keeps the data
        gc.collect()
        r.check(src.spies[-1].calls == 0 and a[2, 1] == 99.0, "numpy keeps the export alive")
        del a
        gc.collect()
        r.check(src.spies[-1].calls == 1, "cmetal's deleter ran once after numpy dropped it")

    def cmetal_views_to_peer(r):
        t = cm.create("float64", [4, 6])
        fill(cm, t, "float64", range(24))
        ref = np.arange(24.0).reshape(4, 6)
        tr, sl, rv = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        cm.check(cm.lib.cm_tensor_transpose(t, 0, 1, ctypes.byref(tr)))
        cm.check(cm.lib.cm_tensor_slice(t, 1, 1, 6, 2, ctypes.byref(sl)))
        cm.check(cm.lib.cm_tensor_slice(t, 0, -1, -(1 << 63), -1, ctypes.byref(rv)))
        for name, v, want in [("transpose", tr, ref.T), ("step", sl, ref[:, 1:6:2]),
                              ("reversed", rv, ref[::-1])]:
            src = CmArray(cm, v)
            a = np.from_dlpack(src)
            r.check(a.shape == want.shape and (a == want).all(), "numpy reads cmetal %s view" % name)
            r.check(a.strides == want.strides, "%s strides %s vs %s" % (name, a.strides, want.strides))
            del a
            gc.collect()
            src.release()
            r.check(src.spies[-1].calls == 1, "%s deleter once" % name)
        s = cm.create("float32", [])
        cm.check(cm.set(s, [], "float32", 7.0))
        src = CmArray(cm, s)
        a = np.from_dlpack(src)
        r.check(a.shape == () and float(a) == 7.0, "0-d to numpy")
        del a
        src.release()
        gc.collect()
        r.check(src.spies[-1].calls == 1, "0-d deleter once")
        cm.release(t)

    r.run("numpy -> cmetal: zero-copy both ways, lifetime", peer_to_cmetal)
    r.run("numpy -> cmetal: cmetal released first", peer_dropped_first_and_last)
    r.run("numpy -> cmetal: non-contiguous, negative and zero strides", non_contiguous_and_negative)
    r.run("numpy -> cmetal: 0-d and zero-size", zero_d_and_zero_size)
    r.run("numpy -> cmetal: dtypes", dtypes_in)
    r.run("numpy -> cmetal: read-only", read_only_in)
    r.run("cmetal -> numpy: zero-copy, both drop orders", cmetal_to_peer)
    r.run("cmetal -> numpy: views and 0-d", cmetal_views_to_peer)


# ---------------------------------------------------------------- PyTorch


def torch_cases(r, cm, torch):
    from torch.utils import dlpack as tdl

    def peer_to_cmetal(r):
        x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        t, spy, proto = cm.import_from(x)
        r.notes.append("torch %s -> cmetal: %s" % (torch.__version__, proto))
        r.check(cm.get(t, [2, 3], "float32") == 11.0, "read through cmetal")
        x[1, 2] = -5.0
        r.check(cm.get(t, [1, 2], "float32") == -5.0, "torch write seen by cmetal (zero-copy)")
        r.check(cm.set(t, [0, 1], "float32", 42.0) == 0 and x[0, 1].item() == 42.0,
                "cmetal write seen by torch (zero-copy)")
        del x
        gc.collect()
        r.check(spy.calls == 0 and cm.get(t, [0, 1], "float32") == 42.0,
                "the import keeps torch's storage alive")
        cm.release(t)
        r.check(spy.calls == 1, "torch's deleter ran exactly once (%d)" % spy.calls)

    def views_in(r):
        base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
        for name, v in {"transpose": base.t(), "step": base[::2, 1::2], "narrow": base[1:, 2:4],
                        "expand": torch.arange(3, dtype=torch.float64).expand(4, 3)}.items():
            t, spy, _ = cm.import_from(v)
            r.check(cm_values(cm, t, "float64") == v.reshape(-1).tolist(), "%s view values" % name)
            r.check(list(cm.info(t).strides[:2]) == list(v.stride()), "%s strides" % name)
            cm.release(t)
            r.check(spy.calls == 1, "%s deleter once" % name)
        s = torch.tensor(2.5)
        t, spy, _ = cm.import_from(s)
        r.check(cm.info(t).ndim == 0 and cm.get(t, [], "float32") == 2.5, "0-d import")
        cm.release(t)

    def dtypes_in(r):
        want = {torch.bfloat16: ("bfloat16",), torch.float16: ("float16",), torch.int8: ("int8",),
                torch.uint8: ("uint8",), torch.int64: ("int64",),
                torch.bool: ("bool", "uint8")}  # torch < 2 exports bool as uint8
        for dt, names in want.items():
            x = torch.ones(3, dtype=dt)
            try:
                t, spy, _ = cm.import_from(x)
            except (RuntimeError, BufferError) as e:  # the peer cannot export it
                r.notes.append("torch %s cannot export %s: %s" % (torch.__version__, dt, e))
                continue
            got = CM_DTYPE_NAMES[cm.info(t).dtype]
            r.check(got in names, "torch %s imports as %s" % (dt, got))
            if dt == torch.bool:
                r.notes.append("torch %s exports bool as %s" % (torch.__version__, got))
            cm.release(t)

    def cmetal_to_peer(r):
        t = cm.create("float32", [3, 4])
        fill(cm, t, "float32", range(12))
        src = CmArray(cm, t)
        x = tdl.from_dlpack(src)
        proto = "versioned" if src.requests[-1] is not None else "legacy"
        r.notes.append("cmetal -> torch %s: %s" % (torch.__version__, proto))
        r.check(x.tolist() == [[float(4 * i + j) for j in range(4)] for i in range(3)], "values")
        x[2, 1] = 77.0
        r.check(cm.get(t, [2, 1], "float32") == 77.0, "torch write seen by cmetal (zero-copy)")
        cm.check(cm.set(t, [0, 0], "float32", -3.0))
        r.check(x[0, 0].item() == -3.0, "cmetal write seen by torch (zero-copy)")
        del x
        gc.collect()
        r.check(src.spies[-1].calls == 1, "torch dropped first: deleter once")
        r.check(cm.get(t, [2, 1], "float32") == 77.0, "cmetal still holds the data")
        x = tdl.from_dlpack(src)
        src.release()  # cmetal first this time
        r.check(src.spies[-1].calls == 0 and x[2, 1].item() == 77.0, "torch keeps the export alive")
        del x
        gc.collect()
        r.check(src.spies[-1].calls == 1, "cmetal dropped first: deleter once")

    def cmetal_views_to_peer(r):
        t = cm.create("float64", [4, 6])
        fill(cm, t, "float64", range(24))
        ref = torch.arange(24, dtype=torch.float64).reshape(4, 6)
        tr, sl = ctypes.c_void_p(), ctypes.c_void_p()
        cm.check(cm.lib.cm_tensor_transpose(t, 0, 1, ctypes.byref(tr)))
        cm.check(cm.lib.cm_tensor_slice(t, 1, 1, 6, 2, ctypes.byref(sl)))
        for name, v, want in [("transpose", tr, ref.t()), ("step", sl, ref[:, 1:6:2])]:
            src = CmArray(cm, v)
            x = tdl.from_dlpack(src)
            r.check(torch.equal(x, want) and x.stride() == want.stride(), "torch reads cmetal %s" % name)
            del x
            src.release()
            gc.collect()
            r.check(src.spies[-1].calls == 1, "%s deleter once" % name)
        s = cm.create("float32", [])
        cm.check(cm.set(s, [], "float32", 7.0))
        src = CmArray(cm, s)
        x = tdl.from_dlpack(src)
        r.check(x.dim() == 0 and x.item() == 7.0, "0-d to torch")
        del x
        src.release()
        gc.collect()
        r.check(src.spies[-1].calls == 1, "0-d deleter once")
        # A dtype the peer may not know: it either works or refuses, and the
        # unconsumed capsule still deletes exactly once.
        b = cm.create("bool", [2])
        fill(cm, b, "bool", [False, True])
        src = CmArray(cm, b)
        try:
            x = tdl.from_dlpack(src)
            r.check(x.tolist() == [False, True], "bool to torch: %s" % x.tolist())
            del x
        except (RuntimeError, BufferError) as e:
            r.notes.append("torch %s refuses kDLBool: %s" % (torch.__version__, str(e).splitlines()[0]))
        src.release()
        gc.collect()
        r.check(src.spies[-1].calls == 1, "bool export deleted once, consumed or not")
        cm.release(t)

    def device_tensors_refused(r):
        x = torch.arange(4.0, device="cuda")
        try:
            cm.import_from(x)
            r.check(False, "a CUDA tensor must not import")
        except ImportFailed as e:
            r.check("kDLCUDA" in str(e), "refusal names the device: %s" % e)
            r.check(e.calls_at_failure == 0, "cmetal called nothing on failure")
            r.check(e.spy.calls <= 1, "refused capsule deleted at most once by its owner")

    r.run("torch -> cmetal: zero-copy both ways, lifetime", peer_to_cmetal)
    if torch.cuda.is_available():
        r.run("torch CUDA -> cmetal: refused, ownership kept", device_tensors_refused)
    r.run("torch -> cmetal: views and 0-d", views_in)
    r.run("torch -> cmetal: dtypes", dtypes_in)
    r.run("cmetal -> torch: zero-copy, both drop orders", cmetal_to_peer)
    r.run("cmetal -> torch: views, 0-d, bool", cmetal_views_to_peer)


# ---------------------------------------------------------------- JAX, CuPy (where installed)


def generic_cases(r, cm, name, mod, from_dlpack, make):
    def round_trip(r):
        x = make()
        try:
            t, spy, proto = cm.import_from(x)
        except ImportFailed as e:  # e.g. a GPU array: cmetal imports host memory only
            r.notes.append("%s -> cmetal refused: %s" % (name, e))
            r.check(e.calls_at_failure == 0, "cmetal called nothing on failure")
            r.check(e.spy.calls <= 1, "the peer's capsule deleted it at most once")
            return
        r.notes.append("%s %s -> cmetal: %s" % (name, mod.__version__, proto))
        r.check(cm_values(cm, t, "float32") == [0.0, 1.0, 2.0, 3.0], "%s values" % name)
        cm.release(t)
        r.check(spy.calls == 1, "%s deleter once" % name)

    def cmetal_to_peer(r):
        c = cm.create("float32", [4])
        fill(cm, c, "float32", [5, 6, 7, 8])
        src = CmArray(cm, c)
        try:
            y = from_dlpack(src)
        except Exception as e:  # e.g. a GPU-only peer refusing host memory
            r.notes.append("cmetal -> %s refused by the peer: %s" % (name, str(e).splitlines()[0]))
            src.release()
            gc.collect()
            r.check(all(s.calls == 1 for s in src.spies), "%s: refused exports deleted once" % name)
            return
        r.notes.append("cmetal -> %s: %s (max_version %s)" % (
            name, "versioned" if src.requests[-1] else "legacy", src.requests[-1]))
        r.check([float(v) for v in list(y)] == [5.0, 6.0, 7.0, 8.0], "%s reads cmetal" % name)
        del y
        src.release()
        gc.collect()
        r.check(src.spies[-1].calls == 1, "%s: cmetal deleter once" % name)

    r.run("%s -> cmetal" % name, round_trip)
    r.run("cmetal -> %s" % name, cmetal_to_peer)


# ---------------------------------------------------------------- cmetal itself


def self_cases(r, cm):
    """cmetal on both sides of the capsules: exercises the versioned
    protocol, which the peers installed here may predate."""

    def versioned_round_trip(r):
        t = cm.create("int32", [2, 3])
        fill(cm, t, "int32", range(6))
        src = CmArray(cm, t)
        back, spy, proto = cm.import_from(src)
        r.check(proto.startswith("versioned 1."), "max_version=(1, 0) gives %s" % proto)
        r.check(cm_values(cm, back, "int32") == list(range(6)), "values")
        cm.check(cm.set(back, [1, 1], "int32", -9))
        r.check(cm.get(t, [1, 1], "int32") == -9, "shared memory")
        src.release()
        cm.release(back)
        r.check(spy.calls == 1, "deleter once")

    def unconsumed_capsules_delete_once(r):
        t = cm.create("float32", [3])
        src = CmArray(cm, t)
        for mv in [None, (1, 0)]:
            cap = src.__dlpack__(max_version=mv)
            r.check(PyCapsule_GetName(cap) == (NAME_VERSIONED if mv else NAME_LEGACY), "capsule name")
            del cap
            gc.collect()
            r.check(src.spies[-1].calls == 1, "dropped capsule %s deletes once" % (mv,))
        try:
            src.__dlpack__(dl_device=(8, 0))
            r.check(False, "kDLMetal export must fail today")
        except BufferError as e:
            r.check("kDLMetal" in str(e), "kDLMetal refused clearly: %s" % e)
        src.release()

    r.run("cmetal -> cmetal through capsules: versioned", versioned_round_trip)
    r.run("cmetal capsules nobody consumed", unconsumed_capsules_delete_once)


# ---------------------------------------------------------------- main


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CMETAL_LIB", "")
    if not path:
        print("usage: dlpack_interop.py path/to/libcmetal.so", file=sys.stderr)
        return 2
    peers = {}
    for name in ["numpy", "torch", "jax", "cupy"]:
        try:
            peers[name] = __import__(name)
        except Exception:
            pass
    if "numpy" not in peers and "torch" not in peers:
        print("SKIP: neither numpy nor torch is importable by %s" % sys.executable)
        return SKIP
    cm = Cmetal(path)
    r = Runner()
    self_cases(r, cm)
    if "numpy" in peers:
        numpy_cases(r, cm, peers["numpy"])
    if "torch" in peers:
        torch_cases(r, cm, peers["torch"])
    if "jax" in peers:
        import jax
        import jax.numpy as jnp
        import jax.dlpack
        cpu = jax.devices("cpu")[0]
        generic_cases(r, cm, "jax-cpu", peers["jax"], jax.dlpack.from_dlpack,
                      lambda: jax.device_put(jnp.arange(4, dtype=jnp.float32), cpu))
        if jax.default_backend() != "cpu":
            generic_cases(r, cm, "jax-" + jax.default_backend(), peers["jax"],
                          jax.dlpack.from_dlpack, lambda: jnp.arange(4, dtype=jnp.float32))
    if "cupy" in peers:
        cp = peers["cupy"]
        generic_cases(r, cm, "cupy", cp, cp.from_dlpack, lambda: cp.arange(4, dtype=cp.float32))
    gc.collect()
    cm.lib.cm_device_release(cm.cpu)
    print("\npeers:", ", ".join("%s %s" % (k, getattr(v, "__version__", "?")) for k, v in peers.items()))
    for n in r.notes:
        print("note:", n)
    print("%d checks passed, %d failed" % (r.passed, len(r.failed)))
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
