"""A stream of chunks read one step ahead, on a thread of its own.

An import's two halves wait on different things: the reading half (pyarrow's parser, NumPy's
casts) and the writing half (SQLite's inserts, compression, sorting) each spend most of their time in C
code that lets go of the interpreter lock. Reading the next chunk while the last one is written
keeps both cores of a small machine busy; at most `depth` chunks wait between them, so memory
stays that of a few chunks.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_END = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def read_ahead(chunks: Iterator[T], depth: int = 2) -> Iterator[T]:
    """The items of `chunks` in order, produced on another thread; an error the producer meets
    is raised here after the items before it. Leaving the loop early (an error of the consumer,
    a break) stops the producer at its next item."""
    waiting: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                waiting.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if not put(chunk):
                    return
        except BaseException as exc:  # handed to the consumer, which raises it in order
            put(_Failed(exc))
            return
        put(_END)

    producer = threading.Thread(target=produce, name="gapwatch-import-reader", daemon=True)
    producer.start()
    try:
        while True:
            item = waiting.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        producer.join()
