"""What an output keeps of its blocks: their data (:data:`STORED`) or only their carries (:data:`VIRTUAL`).

The choice is made once, from ``Layout.virtual``, when the output is specified
(``output_spec``); everything that differs between the two is asked of the chosen
:class:`Storage` rather than decided again where it is needed: where a block's data go,
how often blocks commit, how many are summarised at once, the default summary levels,
and whether a run computes blocks at all.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from ..._defaults import DEFAULT_INFLIGHT, DEFAULT_VIRTUAL_INFLIGHT
from ...summaries import default_windows

__all__ = ["STORED", "VIRTUAL", "Storage", "storage_for"]

_Sink = TypeVar("_Sink")


@dataclasses.dataclass(frozen=True)
class Storage:
    """How a run keeps its blocks: one of :data:`STORED` and :data:`VIRTUAL`."""

    virtual: bool
    """Whether the data chunks are left to be recomputed from the recorded carries (what the identity records)."""
    inflight: int
    """Blocks written (or, virtual, summarised) at once by default in this process."""
    batched: bool
    """Whether computed blocks wait and commit together: a virtual block costs milliseconds, a commit two
    durable writes."""

    @property
    def stores_data(self) -> bool:
        return not self.virtual

    def data_sink(self, sink: _Sink) -> _Sink | None:
        """Where a block's data go: ``sink``, or None where they are not stored."""
        return None if self.virtual else sink

    def stored_blocks(self) -> list[list[int]] | None:
        """The manifest's spans of blocks whose data are stored: none yet (virtual), or None for every block."""
        return [] if self.virtual else None

    def windows(self, rows: int, state_size: int) -> list[int]:
        """The default summary levels of ``rows`` rows of states of ``state_size`` values."""
        return default_windows(rows, state_size, virtual=self.virtual)

    def computes_blocks(self, summarised: bool) -> bool:
        """Whether a run computes whole blocks, or only the carry from block to block (virtual, nothing summarised)."""
        return summarised or not self.virtual


STORED = Storage(virtual=False, inflight=DEFAULT_INFLIGHT, batched=False)
"""Every block's data encoded and written with the block."""

VIRTUAL = Storage(virtual=True, inflight=DEFAULT_VIRTUAL_INFLIGHT, batched=True)
"""Only the carry entering every block, the manifest and the summaries; the data recomputed on reading."""


def storage_for(virtual: bool) -> Storage:
    """:data:`VIRTUAL` or :data:`STORED`."""
    return VIRTUAL if virtual else STORED
