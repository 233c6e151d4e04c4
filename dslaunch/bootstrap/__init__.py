"""Per-rank bootstrap: runs the user's script as ``__main__`` under dslaunch.

``python -m dslaunch.bootstrap [-m] TARGET ARGS...``. The engine
(:func:`dslaunch.engine`) is built lazily, on the first call, so a script
that never asks for it pays nothing for torch here.
"""
