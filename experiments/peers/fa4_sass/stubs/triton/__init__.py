"""Stand-in for triton (quack.autotuner imports it); see ../torch/__init__.py."""
import sys

import torch as _torch  # installs the finder that also serves triton.* submodules

sys.modules[__name__].__class__ = _torch._StubModule
__version__ = "3.0.0"
