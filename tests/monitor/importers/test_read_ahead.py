"""The import's reader runs a chunk ahead on its own thread: the same items in the same order,
an error where the source met it, and a consumer that stops early stops the reader."""

from __future__ import annotations

import threading
from contextlib import closing

import pytest

from monitor.importers.read_ahead import read_ahead


def test_items_arrive_in_order_and_an_error_after_the_items_before_it():
    def source():
        yield from range(5)
        raise ValueError("line 6: not a number")

    got = []
    with pytest.raises(ValueError, match="line 6"):
        for item in read_ahead(source()):
            got.append(item)
    assert got == [0, 1, 2, 3, 4]


def test_a_consumer_that_stops_early_stops_the_reader():
    made = []

    def endless():
        n = 0
        while True:
            made.append(n)
            yield n
            n += 1

    with closing(read_ahead(endless(), depth=2)) as items:
        for item in items:
            if item == 3:
                break
    assert not [t for t in threading.enumerate() if t.name == "gapwatch-import-reader"]
    assert len(made) <= 3 + 1 + 2 + 1  # what was taken, the one in hand, the queue, one being put
