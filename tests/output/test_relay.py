"""The output plane's pure parts: prefixing, long lines, \\r bars (LineRelay) and the bounded sink."""

from __future__ import annotations

import os
import threading
import time

from hypothesis import given
from hypothesis import strategies as st

from dslaunch.output.relay import LINE_LIMIT, READ_SIZE, LineRelay
from dslaunch.output.sink import Sink

P = b"[rank0]: "


def relay(chunks: list[bytes], live: bool = False) -> tuple[bytes, bytes | None]:
    r = LineRelay(P, live)
    out: list[bytes] = []
    bar = None
    for chunk in chunks:
        pieces, bar = r.feed(chunk)
        out.extend(bytes(p) for p in pieces)
    out.extend(bytes(p) for p in r.close())
    return b"".join(out), bar


def test_lines_are_prefixed_and_a_partial_line_waits_for_its_end() -> None:
    r = LineRelay(P, False)
    pieces, bar = r.feed(b"a\nb\nc")
    assert b"".join(pieces) == P + b"a\n" + P + b"b\n" and bar is None
    pieces, _ = r.feed(b"d\n\ne")
    assert b"".join(pieces) == P + b"cd\n" + P + b"\n"
    assert b"".join(r.close()) == P + b"e\n"


def test_a_long_line_is_cut_with_the_prefix_on_every_piece_and_nothing_lost() -> None:
    text = bytes(ord("a") + i % 26 for i in range(3 * LINE_LIMIT + 5))
    chunks = [text[i : i + 1000] for i in range(0, len(text), 1000)] + [b"\ntail\n"]
    out, _ = relay(chunks)
    lines = out.split(b"\n")[:-1]
    assert all(line.startswith(P) and len(line) <= len(P) + LINE_LIMIT for line in lines)
    assert b"".join(line[len(P) :] for line in lines[:-1]) == text
    assert lines[-1] == P + b"tail"


def test_a_cut_never_splits_a_utf8_character() -> None:
    text = ("é" * LINE_LIMIT).encode()
    out, _ = relay([text[i : i + READ_SIZE] for i in range(0, len(text), READ_SIZE)])
    pieces = [line[len(P) :] for line in out.split(b"\n")[:-1]]
    assert all(piece.decode() for piece in pieces) and b"".join(pieces) == text


def test_carriage_return_updates_keep_only_the_last_state_for_a_file() -> None:
    updates = b"".join(b"\r%5d/20000" % i for i in range(20001))
    out, bar = relay([updates[i : i + 4096] for i in range(0, len(updates), 4096)] + [b"\ndone\n"])
    assert out == P + b"20000/20000\n" + P + b"done\n" and bar is None


def test_a_terminal_gets_the_live_state_and_the_final_line_overwrites_it() -> None:
    r = LineRelay(P, True)
    pieces, bar = r.feed(b"start\n\r 10%\r 20%")
    assert b"".join(pieces) == P + b"start\n" and bar == b"\r" + P + b" 20%"
    pieces, bar = r.feed(b"\r100%\nnext\n")
    assert b"".join(pieces) == b"\r" + P + b"100%\n" + P + b"next\n" and bar is None


def test_crlf_is_a_line_end_even_across_reads() -> None:
    assert relay([b"one\r", b"\ntwo\r\n"])[0] == P + b"one\n" + P + b"two\n"
    assert relay([b"shown\r"])[0] == P + b"shown\n"  # a last \r leaves the line as the terminal showed it


@given(st.lists(st.binary(max_size=300).map(lambda b: b.replace(b"\r", b"")), max_size=20))
def test_without_carriage_returns_the_text_is_kept_byte_for_byte(chunks: list[bytes]) -> None:
    out, _ = relay(chunks)
    text = b"".join(chunks)
    expected = b"".join(P + line + b"\n" for line in text.split(b"\n")[: -1 if text.endswith(b"\n") else None])
    assert out == (expected if text else b"")


def test_the_sink_writes_everything_in_order_and_reports_when_full() -> None:
    r, w = os.pipe()
    sink = Sink(w, budget=1 << 16)
    sink.start()
    for i in range(50):
        sink.put("k", [b"%d\n" % i * 1000])
    assert sink.full  # nobody read yet: the pipe holds 64 KiB, the rest waits in the sink
    got = bytearray()
    expected = b"".join(b"%d\n" % i * 1000 for i in range(50))
    while len(got) < len(expected):
        got += os.read(r, 1 << 16)
    sink.wait_idle(None)
    assert bytes(got) == expected and not sink.full
    os.close(r)
    os.close(w)


def test_a_stalled_reader_is_given_up_on_and_feeders_stop_waiting() -> None:
    r, w = os.pipe()
    sink = Sink(w, budget=1 << 10)
    sink.start()
    sink.put("k", [b"x" * (1 << 17)])  # more than the pipe holds: the writer blocks
    waiter = threading.Thread(target=sink.put_wait, args=("k", b"more\n"))
    waiter.start()
    started = time.monotonic()
    sink.wait_idle(0.3)
    waiter.join(5)
    assert sink.dead and not waiter.is_alive() and time.monotonic() - started < 3
    os.close(r)  # the blocked write gets EPIPE and the thread carries on, dropping everything
    sink.put("k", [b"dropped\n"])
    assert sink.idle


def test_on_a_terminal_a_line_never_lands_on_another_streams_bar() -> None:
    r, w = os.pipe()
    sink = Sink(w, live=True)
    sink.put("a", [], b"\r[a]: 50%")
    sink.put("a", [], b"\r[a]: 60%")  # replaces the state not written yet
    sink.put("b", [b"[b]: hello\n"])  # queued lines go before bars
    sink.start()
    sink.wait_idle(None)
    sink.put("b", [b"[b]: more\n"])
    sink.wait_idle(None)
    sink.put("a", [], b"\r[a]: 70%")
    sink.wait_idle(None)
    sink.put("a", [b"\r[a]: 100%\n"])  # its own bar: overwritten, no new line
    sink.wait_idle(None)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        assert f.read() == b"[b]: hello\n\r[a]: 60%\n[b]: more\n\r[a]: 70%\r[a]: 100%\n"
