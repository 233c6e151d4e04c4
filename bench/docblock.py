"""Write a benchmark's table into a docs page, between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``."""

from __future__ import annotations

from pathlib import Path


def write_block(path: Path, name: str, table: str) -> None:
    """Replace the block called ``name`` in ``path`` with ``table`` (append the block if there is none)."""
    text = path.read_text() if path.exists() else ""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{table}\n{end}"
    if begin in text:
        text = text.split(begin)[0] + block + text.split(end, 1)[1]
    else:
        text = text + ("\n" if text else "") + block + "\n"
    path.write_text(text)


def free_port() -> int:
    """A TCP port nothing listens on now, for one launch's rendezvous."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
