# SPDX-License-Identifier: Apache-2.0
"""Choice points: code that picks among visible alternatives at run time.

Each shape here is one a resolver must turn into a fork with every candidate
and its condition (see docs/resolver.md, "Trees"):

* a literal dict of callables indexed by a run-time key;
* a conditional expression of callables, and of constructors stored on ``self``;
* a module-level singleton made by a factory that returns one of several classes;
* a function with several returns;
* a lazily filled module global (``global`` + ``importlib``);
* ``torch.compile`` / ``functools.partial`` results and a decorator without ``functools.wraps``;
* helpers that are *not* pass-throughs (a platform query, a host synchronise);
* a name bound to its own call result (must end as a cycle, not a crash);
* one name returned twice, bound again before each return (a `try` import with a vendored fallback);
* an attribute assigned on several paths, and what a call rules out itself (its guards, its arguments).
"""

import functools
import importlib
import os

import torch

from vllm.platforms import current_platform
from vllm.triton_utils import tl, triton


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _scale_kernel(src_ptr, dst_ptr, scale, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask) * scale, mask=mask)


def _write_auto(key, value, key_cache, value_cache, slot_mapping):
    torch.ops._C_cache_ops.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, "auto", None, None)


def _write_fp8(key, value, key_cache, value_cache, slot_mapping):
    n = key.numel()
    _scale_kernel[(triton.cdiv(n, 128),)](key, key_cache, 0.5, n, BLOCK=128)


# 1. a literal dict of callables, indexed at run time
_CACHE_WRITERS = {"auto": _write_auto, "fp8": _write_fp8}


def write_cache(kv_cache_dtype, key, value, key_cache, value_cache, slot_mapping):
    _CACHE_WRITERS[kv_cache_dtype](key, value, key_cache, value_cache, slot_mapping)


def _copy_launch(src, dst):
    _copy_kernel[(triton.cdiv(src.numel(), 256),)](src, dst, src.numel(), BLOCK=256)


def _scaled_launch(src, dst):
    _scale_kernel[(triton.cdiv(src.numel(), 256),)](src, dst, 2.0, src.numel(), BLOCK=256)


# 2. a conditional expression of callables
def copy_or_scale(src, dst, scaled):
    fn = _scaled_launch if scaled else _copy_launch
    fn(src, dst)


class CacheAuto(torch.nn.Module):
    def forward(self, key, value, key_cache, value_cache, slot_mapping):
        _write_auto(key, value, key_cache, value_cache, slot_mapping)


class CacheFp8(torch.nn.Module):
    def forward(self, key, value, key_cache, value_cache, slot_mapping):
        _write_fp8(key, value, key_cache, value_cache, slot_mapping)


class CacheWriter:
    def __init__(self, kv_cache_dtype: str):
        # a conditional expression of constructors, called later through nn.Module.__call__
        self.cache_op = CacheFp8() if kv_cache_dtype.startswith("fp8") else CacheAuto()

    def __call__(self, key, value, key_cache, value_cache, slot_mapping):
        self.cache_op(key, value, key_cache, value_cache, slot_mapping)


# 3. a module-level singleton made by a factory that returns one of several classes
class _BaseOps:
    @staticmethod
    def copy_blocks(src, dst):
        _copy_launch(src, dst)


class _CudaOps(_BaseOps):
    @staticmethod
    def copy_blocks(src, dst):
        torch.ops._C_cache_ops.copy_blocks(src, dst)


class _OotOps(_BaseOps):
    pass  # inherits copy_blocks


def get_device_ops():
    if current_platform.is_cuda():
        return _CudaOps
    if current_platform.is_out_of_tree():
        return _OotOps
    return _BaseOps


DeviceOps = get_device_ops()


def copy_blocks(src, dst):
    DeviceOps.copy_blocks(src, dst)


# 4. a function with several returns, each a callable
def pick_writer(kv_cache_dtype: str):
    if kv_cache_dtype == "auto":
        return _write_auto
    return _write_fp8


def write_picked(kv_cache_dtype, key, value, key_cache, value_cache, slot_mapping):
    writer = pick_writer(kv_cache_dtype)
    writer(key, value, key_cache, value_cache, slot_mapping)


# 5. a lazily filled module global
_fused_impl = None


def _lazy_init():
    global _fused_impl
    if _fused_impl is None:
        _fused_impl = getattr(importlib.import_module("minivendor_ops"), "fused_qk_norm", None)


def fused_qk_norm(*args, **kwargs):
    _lazy_init()
    return _fused_impl(*args, **kwargs)


# 6. compiled and partial callables, and a decorator without functools.wraps
compiled_copy = torch.compile(_copy_launch, dynamic=True)
half_scale = functools.partial(_write_fp8)


def timed(fn):
    def inner(*args, **kwargs):
        out = fn(*args, **kwargs)
        return out

    return inner


timed_write = timed(_write_auto)


def run_wrapped(src, dst, key, value, key_cache, value_cache, slot_mapping):
    compiled_copy(src, dst)
    half_scale(key, value, key_cache, value_cache, slot_mapping)
    timed_write(key, value, key_cache, value_cache, slot_mapping)


# 7. helpers that are not pass-throughs
_FMT = {}


def _use_fnuz(device: int = 0) -> int:
    """Asks the platform once; what it returns is its own table entry, not the platform's answer."""
    if device not in _FMT:
        _FMT[device] = 1 if current_platform.is_rocm() else 0
    return _FMT[device]


def swap_blocks(src, dst, idx):
    rows = src.index_select(0, idx)
    dst.index_copy_(0, idx, rows)
    torch.cuda.synchronize()


# 8. a name bound to its own call result
def collect(t, acc):
    if t is None:
        return acc
    acc = collect(None, acc)
    return acc


def prepare(src, dst, idx):
    fnuz = _use_fnuz(0)
    swap_blocks(src, dst, idx)
    return fnuz


# 9. constants that decide branches: a function that always returns one value, `self.x` set once in __init__
def get_kernel_version():
    return 2


class VersionedLauncher:
    def __init__(self):
        self.version = get_kernel_version()

    def launch(self, src, dst):
        if self.version == 3:
            _scaled_launch(src, dst)  # never taken: the version is always 2
        else:
            _copy_launch(src, dst)


# 10. a flag computed in __init__ from the platform, and a decorator that runs its function only under a condition
def only_on_cuda(func):
    def wrapper(*args, **kwargs):
        if current_platform.is_cuda():
            return func(*args, **kwargs)
        return None

    return wrapper


@only_on_cuda
def fast_path_enabled() -> bool:
    return True


class FlaggedLauncher:
    def __init__(self, n: int):
        self.use_scaled = n == 128 and not current_platform.is_out_of_tree()

    def launch(self, src, dst):
        if self.use_scaled:
            _scaled_launch(src, dst)
        elif fast_path_enabled():
            _scaled_launch(src, dst)
        else:
            _copy_launch(src, dst)


# 10b. a helper that asks the platform once and caches the answer in a module global (`if _G is None: _G = ...`,
# `return _G`), and one that returns a platform query: both fold, so their branches are dead out of tree
_FAST_SCALE_OK: bool | None = None


def _fast_scale_available() -> bool:
    global _FAST_SCALE_OK
    if _FAST_SCALE_OK is None:
        _FAST_SCALE_OK = current_platform.is_cuda() and current_platform.has_device_capability(80)
    return _FAST_SCALE_OK


def _scale_supported() -> bool:
    return current_platform.is_rocm()


def gated_launch(src, dst, n: int):
    if _fast_scale_available() and n > 0:
        _scaled_launch(src, dst)
    elif _scale_supported():
        _scaled_launch(src, dst)
    else:
        _copy_launch(src, dst)


# 10c. what a call passes, or leaves to the default, decides the callee's guards on those parameters
def _launch_by_mode(src, dst, mode: str = "scale", exact: bool = False):
    if mode == "scale" and not exact:
        _scaled_launch(src, dst)
    else:
        _copy_launch(src, dst)


def launch_defaults(src, dst):
    _launch_by_mode(src, dst)


def launch_exact(src, dst):
    _launch_by_mode(src, dst, exact=True)


def launch_passing_on(src, dst, exact: bool = True):
    _launch_by_mode(src, dst, "scale", exact)


def launch_passing_on_caller(src, dst):
    launch_passing_on(src, dst)


def launch_unknown(src, dst, mode):
    _launch_by_mode(src, dst, mode)


def _launch_if_scaled(src, dst, scale=None):
    if scale is not None:
        _scaled_launch(src, dst)
    else:
        _copy_launch(src, dst)


def launch_no_scale(src, dst):
    _launch_if_scaled(src, dst)


def launch_with_scale(src, dst):
    _launch_if_scaled(src, dst, scale=2)


# 11. constructor arguments flow to the base class: `self.writer_cls` is what the subclass passes
class _WriterBase:
    def __init__(self, writer_cls=None):
        self.writer_cls = writer_cls if writer_cls is not None else CacheAuto

    def write(self, key, value, key_cache, value_cache, slot_mapping):
        writer = self.writer_cls()
        writer(key, value, key_cache, value_cache, slot_mapping)


class Fp8Writer(_WriterBase):
    def __init__(self):
        super().__init__(writer_cls=CacheFp8)


# 12. one name returned twice, bound again before each return: the pip package in a `try` (not installed
# here, so its import raises), else the copy vendored in this plugin
def _import_block_ops():
    try:
        module = importlib.import_module("minivendor_ops")
        return module
    except ImportError:
        pass
    module = importlib.import_module("mini_metax.attention.ops.vendored_block_ops")
    return module


def copy_blocks_vendored(src, dst):
    block_ops = _import_block_ops()
    block_ops.copy_blocks(src, dst)


# 13. an attribute assigned on both sides of an `if` in __init__ (both classes run one inherited `__call__`), and a
# flag the class stores from the local that chose a class: a call under `if self.use_scaled:` takes only the class
# chosen when the flag holds
class _ScaledStep:
    def __call__(self, src, dst):
        _scaled_launch(src, dst)


class _CopyStep:
    def __call__(self, src, dst):
        _copy_launch(src, dst)


class _ExactStep(_CopyStep):
    exact = True


class StepRunner:
    def __init__(self, n: int, exact: bool):
        use_scaled = n == 128
        self.use_scaled = use_scaled
        if use_scaled:
            step_cls = _ScaledStep
        else:
            step_cls = _CopyStep
        self.step = step_cls()
        if exact:
            self.tail = _ExactStep()
        else:
            self.tail = _CopyStep()

    def run(self, src, dst):
        if self.use_scaled:
            self.step(src, dst)
        else:
            self.step(src, dst)
        self.tail(src, dst)


# 14. what a call rules out itself: a guard on a module-level expression that also chose the attribute's class in
# __init__, an object whose `__call__` does not take what the call passes (TypeError), and a base class's value
# that a subclass replaces only under a condition
class _WideStep:
    def __call__(self, src, dst, wide: bool = False):
        _scaled_launch(src, dst)


class StagedRunner:
    def __init__(self, exact: bool):
        if os.environ.get("MINI_STAGE") == "first":
            self.head = _ScaledStep()
        else:
            self.head = _CopyStep()
        if exact:
            self.body = _WideStep()
        else:
            self.body = _CopyStep()

    def run(self, src, dst):
        if os.environ.get("MINI_STAGE") == "first":
            self.head(src, dst)
        self.body(src, dst, wide=True)


class _BaseOp:
    def __init__(self):
        self.impl = _CopyStep()


class _FastOp(_BaseOp):
    def __init__(self, fast: bool):
        super().__init__()
        if fast:
            self.impl = _ScaledStep()

    def run(self, src, dst):
        self.impl(src, dst)


# 15. a flag set False, then set again only under a guard this platform decides False (and in another method under a
# flag that copies that guard): it stays False, so the branch it enables is dead out of tree
class GatedRouter:
    def __init__(self, n: int):
        can_use_cuda = current_platform.is_cuda() and n > 0
        self.allow_specialized = can_use_cuda
        self.allow_scaled = False
        if can_use_cuda:
            self.allow_scaled = n % 8 == 0

    def set_size(self, n: int):
        if self.allow_specialized:
            self.allow_scaled = n % 8 == 0

    def route(self, src, dst):
        if self.allow_scaled:
            _scaled_launch(src, dst)
        else:
            _copy_launch(src, dst)


# 16. `assert isinstance(self.impl, C)` before a call on it: only the alternatives of `self.impl` that are a C run
class _FastImpl:
    def run(self, src, dst):
        _scaled_launch(src, dst)


class _SlowImpl:
    def run(self, src, dst):
        _copy_launch(src, dst)


class ImplKernel:
    def __init__(self, fast: bool):
        if fast:
            self.impl = _FastImpl()
        else:
            self.impl = _SlowImpl()

    def apply(self, src, dst):
        assert isinstance(self.impl, _FastImpl)
        self.impl.run(src, dst)

    def apply_any(self, src, dst):
        self.impl.run(src, dst)


# 17. an object called: what the call passes, or leaves to the default, decides the guards of its `forward`, also
# behind a `forward(self, *args, **kwargs)` that hands the arguments on to the method it picked in __init__
class _AddNorm(torch.nn.Module):
    def forward(self, x, residual=None):
        if residual is None:
            _copy_launch(x, x)
        else:
            _scaled_launch(x, residual)


class _PickedNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        if current_platform.is_cuda():
            self._impl = self.forward_fast
        else:
            self._impl = self.forward_plain

    def forward(self, *args, **kwargs):
        return self._impl(*args, **kwargs)

    def forward_fast(self, x, residual=None):
        if residual is not None:
            _scaled_launch(x, residual)

    def forward_plain(self, x, residual=None):
        if residual is not None:
            _scaled_launch(x, residual)
        else:
            _copy_launch(x, x)


class NormBlock:
    def __init__(self):
        self.norm = _AddNorm()
        self.picked = _PickedNorm()

    def plain(self, x):
        return self.norm(x)

    def with_residual(self, x, r):
        return self.norm(x, r)

    def picked_plain(self, x):
        return self.picked(x)

    def picked_residual(self, x, r):
        return self.picked(x, residual=r)

    def guarded(self, x, r=None):
        # the caller's own guard says what it passes: `r` is not None in the else
        if r is None:
            r = x
            return self.norm(x)
        else:
            return self.norm(x, r)

    def defaulted(self, x, r=None):
        if r is None:
            r = x  # (bound again under the guard: whatever `r` was, it is not known here)
            return self.norm(x, r)

    def looped(self, x, r=None):
        if r is not None:
            for _ in range(2):
                x = self.norm(x, r)  # (a second turn passes the r bound below)
                r = None
        return x

    def each(self, xs, r=None):
        if r is None:
            return [self.norm(x, r) for x, r in xs]  # (the comprehension's own r)


# 18. a caller's guard on a module-level expression reaches the calls inside a callee of the same module: the object
# the callee calls was chosen by the same expression in __init__
class StagedModel:
    def __init__(self):
        if os.environ.get("MINI_STAGE") == "first":
            self.embed = _ScaledStep()
        else:
            self.embed = _CopyStep()

    def embed_input(self, src, dst):
        self.embed(src, dst)

    def forward(self, src, dst):
        if os.environ.get("MINI_STAGE") == "first":
            self.embed_input(src, dst)


# 19. the base class's method through `super()`: a branch of the override like any call; and what the verdict says
# when the call takes no branch that reaches a kernel: the function's other code runs (a PyTorch fallback), or it
# raises (an `if c: raise` the platform takes)
class _ScaleStage:
    def run(self, src, dst):
        _scaled_launch(src, dst)


class _CheckedScaleStage(_ScaleStage):
    def run(self, src, dst, skip: bool = False):
        if skip:
            dst.copy_(src)
            return
        super().run(src, dst)


def run_checked(src, dst):
    stage = _CheckedScaleStage()
    stage.run(src, dst)


def _scale_or_torch(src, dst, scale=None):
    if scale is not None:
        _scaled_launch(src, dst)
    else:
        torch.mul(src, 2.0, out=dst)


def torch_fallback(src, dst):
    _scale_or_torch(src, dst)


def _cuda_only_copy(src, dst):
    if not current_platform.is_cuda():
        raise NotImplementedError("the copy kernel is only built for CUDA")
    _copy_launch(src, dst)


def copy_cuda_only(src, dst):
    _cuda_only_copy(src, dst)


# 20. a stack of layers: an `nn.ModuleList` a helper builds from the callable its caller passes (a lambda), and one
# built in place; a loop over a slice of the first, and over `enumerate` of the second, calls each layer
class _PassLayer(torch.nn.Module):
    def forward(self, src, dst):
        return src


class _ScaleLayer(torch.nn.Module):
    def forward(self, src, dst):
        _scaled_launch(src, dst)


class _CopyLayer(torch.nn.Module):
    def forward(self, src, dst):
        _copy_launch(src, dst)


def _make_stack(n: int, layer_fn, prefix: str = ""):
    start, end = 0, n
    layers = torch.nn.ModuleList(
        [_PassLayer() for _ in range(start)] + [layer_fn(prefix=f"{prefix}.{i}") for i in range(start, end)]
    )
    return start, end, layers


class LayerStack(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.start, self.end, self.layers = _make_stack(n, lambda prefix: _ScaleLayer())
        self.blocks = torch.nn.ModuleList([_CopyLayer() for _ in range(n)])
        self.heads = torch.nn.ModuleDict({"scale": _ScaleLayer(), "copy": _CopyLayer()})

    def forward(self, src, dst):
        for layer in self.layers[self.start:self.end]:
            layer(src, dst)

    def forward_blocks(self, src, dst):
        for i, block in enumerate(self.blocks):
            block(src, dst)

    def forward_all(self, src, dst):
        for each in self.layers:
            each(src, dst)

    def forward_indexed(self, src, dst):
        for i in range(self.end):
            block = self.blocks[i]
            block.forward(src, dst)

    def forward_head(self, src, dst, name: str):
        return self.heads[name](src, dst)

    def forward_heads(self, src, dst):
        for head in self.heads.values():
            head(src, dst)
