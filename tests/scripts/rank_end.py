"""A rank that leaves work for the interpreter's exit; every piece must arrive although the bootstrap ends the rank
with os._exit (MODE picks how the script ends, OUT_DIR is where its files go).

Nothing here is flushed or closed by the script: the print has no newline, the files stay open (held by a module
that outlives the script), the logging handlers are never shut down, the thread and the
child process are never joined.
"""

import atexit
import builtins
import ctypes
import gzip
import io
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import weakref

import structlog

MODE = os.environ.get("MODE", "exit0")
OUT = os.environ["OUT_DIR"]


def out(name: str) -> str:
    return os.path.join(OUT, name)


class _AtFinalisation:
    def __del__(self, write=os.write) -> None:  # runs only if the interpreter finalises
        write(1, b"interpreter finalised\n")


builtins._rank_end_sentinel = _AtFinalisation()


def _late_writer() -> None:  # a non-daemon thread: joined at exit (it outlasts the child)
    time.sleep(1.5)
    with open(out("thread.txt"), "w") as f:
        f.write("thread joined\n")


def _child() -> None:  # a non-daemon multiprocessing child: multiprocessing's atexit joins it
    time.sleep(0.3)
    with open(out("child.txt"), "w") as f:
        f.write("child joined\n")


class _Cycle:  # cyclic garbage: its __del__ runs only if something collects it, as finalisation does
    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        with open(out("cycle.txt"), "w") as f:
            f.write("cyclic garbage collected\n")


kept = open(out("kept.txt"), "w", buffering=1 << 20)  # held by sys.modules["__keep__"]: alive at exit
kept.write("kept open, never flushed\n")
packed = gzip.open(out("packed.txt.gz"), "wt")
packed.write("gzip needs its trailer\n" * 100)
sys.modules["__keep__"] = type(sys)("__keep__")
sys.modules["__keep__"].files = [kept, packed]  # type: ignore[attr-defined]
_Cycle()

handler = logging.FileHandler(out("logging.txt"))
logging.getLogger("user").addHandler(handler)
logging.getLogger("user").setLevel(logging.INFO)
logging.getLogger("user").info("logged through logging")
structlog.configure(logger_factory=structlog.WriteLoggerFactory(file=open(out("structlog.txt"), "w")))
structlog.get_logger().info("logged through structlog")

atexit.register(lambda: print("user atexit handler ran", flush=False))
atexit.register(lambda: open(out("atexit.txt"), "w").write("atexit wrote\n"))
weakref.finalize(handler, lambda: print("weakref.finalize ran"))
threading.Thread(target=_late_writer).start()
multiprocessing.get_context("fork").Process(target=_child).start()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
native = libc.fopen(out("native.txt").encode(), b"w")  # a C FILE*, block-buffered, never fclose'd: exit() flushes it
libc.fputs(b"written through C stdio\n", ctypes.c_void_p(native))
print("printed without newline or flush", end="")

if MODE == "exit3":
    sys.exit(3)
if MODE == "message":
    sys.exit("a message to stderr")
if MODE == "raise":
    raise RuntimeError("the script fails")
if MODE == "interrupt":
    raise KeyboardInterrupt
if MODE == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
if MODE == "badstdout":  # Python exits 120 when sys.stdout cannot be flushed at exit

    class _Refuses(io.TextIOBase):
        def write(self, text: str) -> int:
            return len(text)

        def flush(self) -> None:
            raise OSError("flush refused")

    sys.stdout = _Refuses()
if MODE == "preopened":
    import preopened  # imported before the script runs when the job preloads it

    preopened.LOG.write("written by the rank into a file the preloaded module opened\n")
