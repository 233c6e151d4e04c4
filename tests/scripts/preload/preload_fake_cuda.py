"""Stands in for a module that initialises CUDA at import (there is no GPU here): a fake ``torch`` whose
``torch.cuda.is_initialized()`` is True, seen only by the zygote's check (its ranks are exec'd)."""

import sys
import types

torch = types.ModuleType("torch")
torch.cuda = types.SimpleNamespace(is_initialized=lambda: True)  # type: ignore[attr-defined]
sys.modules["torch"] = torch
