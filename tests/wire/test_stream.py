"""A remote agent's stdout cut into event lines and runs of output (dslaunch/wire/stream.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dslaunch import wire


@given(
    st.lists(st.sampled_from(["[rank0]: out\n", "[rank1]: é " + wire.MARKER + "\n", "EVENT", "\n"]), max_size=30),
    st.lists(st.integers(1, 40), min_size=1, max_size=5),
)
def test_split_events_gives_each_event_line_alone_and_every_byte_in_order(items: list[str], cuts: list[int]) -> None:
    event = wire.encode(wire.Done(node_rank=0, code=0))
    text = "".join(event if item == "EVENT" else item for item in items).encode()
    chunks, pos, i = [], 0, 0
    while pos < len(text):  # arrives in arbitrary pieces, even mid-character
        chunks.append(text[pos : pos + cuts[i % len(cuts)]])
        pos += cuts[i % len(cuts)]
        i += 1
    pieces = list(wire.split_events(chunks))
    assert "".join(pieces).encode() == text
    assert [p for p in pieces if wire.decode(p) is not None] == [event] * items.count("EVENT")
    assert all(p.endswith("\n") for p in pieces)
