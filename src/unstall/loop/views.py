"""The job collections a policy reads during one scheduling round: live views of the engine's
own collections, not copies, which refuse to be read once the round is over."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import overload

from unstall.loop.jobs import SimInvariantError
from unstall.sched.base import JobView


class RoundView(Sequence[JobView]):
    """A live sequence of views that a policy may read during one round only.

    Passing the engine's own collections instead of copies saves a copy of every running job
    per round; once ``decide`` returns they change, so reading one later raises instead of
    silently showing another instant. Indexing and slicing (``snapshot.queued[0]``) copy the
    views once, on first use in the round, as a tuple does them.
    """

    __slots__ = ("_items", "_live", "_name")

    def __init__(self, live: Collection[JobView], name: str) -> None:
        self._live: Collection[JobView] | None = live
        self._name = name
        self._items: tuple[JobView, ...] | None = None

    def expire(self) -> None:
        self._live = None
        self._items = None

    @overload
    def __getitem__(self, index: int) -> JobView: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[JobView, ...]: ...

    def __getitem__(self, index: int | slice) -> JobView | tuple[JobView, ...]:
        source = self._source()
        if self._items is None:
            self._items = tuple(source)
        return self._items[index]

    def _source(self) -> Collection[JobView]:
        if self._live is None:
            raise SimInvariantError(
                f"snapshot.{self._name} was read after its round; copy it (tuple(...)) inside "
                "decide() to keep it"
            )
        return self._live

    def __len__(self) -> int:
        return len(self._source())

    def __iter__(self) -> Iterator[JobView]:
        return iter(self._source())

    def __reversed__(self) -> Iterator[JobView]:
        # The engine's collections are dicts in insertion order: the newest views come first
        # (a policy that keeps the queue finds what joined it without a pass over all of it).
        return reversed(self._source())  # type: ignore[call-overload]

    def __contains__(self, item: object) -> bool:
        return item in self._source()


class SpreadViews(Collection[JobView]):
    """The views of the spread running jobs, looked up only when a policy iterates them (most
    policies never do), in the order of the engine's set of their indices."""

    __slots__ = ("_indices", "_views")

    def __init__(self, indices: set[int], views: dict[int, JobView]) -> None:
        self._indices = indices
        self._views = views

    def __len__(self) -> int:
        return len(self._indices)

    def __iter__(self) -> Iterator[JobView]:
        return map(self._views.__getitem__, self._indices)

    def __contains__(self, item: object) -> bool:
        return isinstance(item, JobView) and self._views.get(item.index) is item
