"""Stand-in for torch, so that flash_attn.cute and quack import on a machine without torch.

Only the kernel-building path runs (fake tensors, no device): torch is needed
there just for module-level names (dtypes, type hints, torch.library
decorators...). Any attribute, and any torch.* / triton.* submodule, is a fresh
dummy class: hashable, callable, subscriptable and usable in `X | None` hints.
torch.cuda reports no GPU and compute capability (9, 0).
"""
import importlib.abc
import importlib.machinery
import sys
import types


class _DummyMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _dummy(f"{cls.__name__}.{name}")

    def __call__(cls, *args, **kwargs):
        return _dummy(cls.__name__ + "()")

    def __getitem__(cls, key):
        return cls


def _dummy(name):
    return _DummyMeta(name, (), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _dummy(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every torch.x / triton.x submodule as a _StubModule."""

    def find_spec(self, fullname, path, target=None):
        if "." in fullname and fullname.split(".")[0] in ("torch", "triton"):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
__version__ = "0.0.0+stub"
sys.modules[__name__].__class__ = _StubModule

cuda = _StubModule("torch.cuda")
cuda.__path__ = []
cuda.is_available = lambda: False
cuda.get_device_capability = lambda *args, **kwargs: (9, 0)
cuda.current_device = lambda: 0
sys.modules["torch.cuda"] = cuda
