"""Sorted record ids and their record numbers, compact enough to ship as a Beam side input."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


class IdIndex:
    """Unique ids sorted by their UTF-8 bytes; an id's record number is its position.

    Ids are held as one fixed-width bytes array (`S<max id length>`), so 10M ids of ~40 bytes
    take ~400 MB rather than ~1 GB of Python strings, and lookups are one vectorized
    `np.searchsorted`.
    """

    def __init__(self, sorted_ids: np.ndarray):
        self._ids = sorted_ids

    @classmethod
    def from_ids(cls, ids: Iterable[str]) -> IdIndex:
        """Sorts `ids` into an index.

        Args:
            ids: unique record ids (str).

        Returns:
            The `IdIndex`.

        Raises:
            ValueError: on a duplicate id (callers deduplicate first).

        Example:
            IdIndex.from_ids(["b", "a"]).lookup(["a", "c"])  # [0, -1]
        """
        return cls.sorting(ids)[0]

    @classmethod
    def sorting(cls, ids: Iterable[str]) -> tuple[IdIndex, np.ndarray]:
        """Sorts `ids` into an index, and says where each came from.

        Args:
            ids: unique record ids (str).

        Returns:
            `(the index, order)`: `order` is int64 [N], `order[r]` the input position of record r.

        Raises:
            ValueError: on a duplicate id.
        """
        encoded = _encode(list(ids))
        order = np.argsort(encoded, kind="stable").astype(np.int64)
        encoded = encoded[order]
        repeated = np.flatnonzero(encoded[1:] == encoded[:-1])
        if len(repeated):
            raise ValueError(f"duplicate record id {encoded[repeated[0]].decode()!r}")
        return cls(encoded), order

    def __len__(self) -> int:
        return len(self._ids)

    def lookup(self, ids: Sequence[str]) -> np.ndarray:
        """int64 [len(ids)]: the record number of each id, -1 where absent.

        Args:
            ids: the ids to look up (str).

        Returns:
            int64 [len(ids)].
        """
        if not len(ids):
            return np.zeros([0], np.int64)
        queries = _encode(list(ids))
        if not len(self._ids):
            return np.full([len(queries)], -1, np.int64)
        positions = np.minimum(np.searchsorted(self._ids, queries), len(self._ids) - 1)
        found = self._ids[positions] == queries
        return np.where(found, positions, -1).astype(np.int64)

    def take(self, record_numbers: np.ndarray) -> IdIndex:
        """The ids at ascending `record_numbers` (a sorted subset stays sorted).

        Args:
            record_numbers: int64 [k], record numbers in [0, N).

        Returns:
            An `IdIndex` of those k ids.
        """
        return IdIndex(self._ids[np.asarray(record_numbers, np.int64)])

    def id_list(self) -> list[str]:
        """The ids as a list of str, in record order."""
        return [raw.decode("utf-8") for raw in self._ids.tolist()]


def _encode(ids: list[str]) -> np.ndarray:
    if not ids:
        return np.zeros([0], "S1")
    return np.array([record_id.encode("utf-8") for record_id in ids], dtype=bytes)
