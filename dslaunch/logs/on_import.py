"""Run code right after a module's import, so a rank pays for stdlib ``logging`` only once something imports it.

A rank routes torch's loggers once ``import torch`` has finished, and Python warnings into ``py:warnings`` once
``logging`` is imported: a trivial script imports neither, and its start-up is spared ``logging`` with ``re``,
``traceback`` and ``threading`` (about 10 ms of CPU a rank; tests/bootstrap/test_rank_imports.py checks it).
Until ``logging`` is loaded, :func:`hold_warnings` stands in for ``warnings.showwarning``: the first warning
shown imports ``logging`` (which routes warnings) and is then shown as if they had been routed from the start.

Stdlib only; imports nothing of dslaunch.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings

TYPE_CHECKING = False  # typing itself is not imported at run time (a rank's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class _AfterImport:
    """A meta path finder (first on ``sys.meta_path``) that runs hooks right after a watched top-level module's
    code has run, once; it leaves ``sys.meta_path`` when nothing is left to watch."""

    def __init__(self) -> None:
        self.pending: dict[str, list[Callable[[], None]]] = {}

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        hooks = self.pending.pop(name, None)
        if hooks is None:
            return None
        if not self.pending:
            _leave()
        found = importlib.util.find_spec(name)  # the real finders: this one no longer watches the name
        loader = found.loader if found is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return found
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            for hook in hooks:
                hook()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return found


_FINDER = _AfterImport()


def _leave() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def after_import(name: str, hook: Callable[[], None]) -> None:
    """Run ``hook`` once the top-level module ``name`` has been imported: now, if it has been."""
    if name in sys.modules:
        hook()
        return
    hooks = _FINDER.pending.setdefault(name, [])
    if hook not in hooks:
        hooks.append(hook)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


_held: dict[str, Any] = {}  # "original": the showwarning the stand-in replaced; "shim": the stand-in


def hold_warnings(module: str) -> None:
    """Until ``module`` is imported, warnings are shown by a stand-in that imports it first (its after-import hooks
    route warnings, after :func:`release_warnings`), then shows the warning through ``warnings.showwarning``."""
    if module in sys.modules or "shim" in _held:
        return
    original = warnings.showwarning

    def showwarning(  # noqa: PLR0917 - warnings.showwarning's own signature
        message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        importlib.import_module(module)
        release_warnings()  # when the import ran no hook (a loader without exec_module)
        show = warnings.showwarning
        (original if show is showwarning else show)(message, category, filename, lineno, file, line)

    _held.update(original=original, shim=showwarning)
    warnings.showwarning = showwarning


def release_warnings() -> Callable[[], None]:
    """Put the original ``warnings.showwarning`` back, for the router to wrap; return what puts back a
    replacement the script made meanwhile (a no-op when it made none)."""
    shim = _held.pop("shim", None)
    original = _held.pop("original", None)
    if shim is None:
        return lambda: None
    current = warnings.showwarning
    warnings.showwarning = original
    if current is shim:
        return lambda: None

    def put_back() -> None:
        warnings.showwarning = current

    return put_back
