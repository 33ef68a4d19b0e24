"""Which write task each file group goes to: the largest groups first, each to the least loaded task.

The driver's threads and Spark's write tasks use the same slots, so a file group is written by one task.
"""

from __future__ import annotations

import heapq


def balanced_slots(sizes: dict[str, int], tasks: int) -> dict[str, int]:
    """Each file group's write task: the largest groups first, each to the least loaded task."""
    loads = [(0, task) for task in range(tasks)]
    slots = {}
    for file_id, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        load, task = heapq.heappop(loads)
        slots[file_id] = task
        heapq.heappush(loads, (load + max(size, 1), task))
    return slots
