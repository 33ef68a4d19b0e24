"""A bounded least-recently-used map that several threads share: the per-process caches of things that
never change once written (index runs, the ordering bounds of data files)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class LruCache(Generic[V]):
    """At most ``capacity`` entries; the least recently used goes first. Every lookup and update holds
    ``_lock``. Computing a missing value happens outside it, so two threads that miss the same key may
    both compute it; callers cache only values that are the same whoever computes them."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def pop(self, key: Hashable) -> V | None:
        """The entry of ``key``, removed; ``None`` when there is none."""
        with self._lock:
            return self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
