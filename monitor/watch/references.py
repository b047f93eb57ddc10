"""The reference runs a watch service's runs are judged against, each read from the store once
however many runs share it.

A team watches dozens of runs against one baseline; each run's watcher holding its own copy of a
1.4M-step reference would hold it dozens of times over, and read it from the store as often. Here a
reference is read and prepared for alignment (`PreparedReference`) once per version of it (a live
reference grows): a watcher asks for the version its marks show, and every watcher asking for the
same version gets the same object. A version no watcher holds any more is gone with the last one
(weak references), so nothing here outlives the runs that use it.
"""

from __future__ import annotations

import weakref

from monitor.judging.align import PreparedReference


class SharedReferences:
    """Prepared references by (name, version), for the watchers of one service (one thread)."""

    def __init__(self, store) -> None:
        self.store = store
        self._held: weakref.WeakValueDictionary[tuple[str, tuple], PreparedReference] = weakref.WeakValueDictionary()

    def get(self, name: str, version: tuple) -> PreparedReference:
        """Reference `name` as of `version` (what its marks show: last step, points, last event)."""
        prepared = self._held.get((name, version))
        if prepared is None:
            prepared = PreparedReference(self.store.load_run(name))
            self._held[(name, version)] = prepared
        return prepared
