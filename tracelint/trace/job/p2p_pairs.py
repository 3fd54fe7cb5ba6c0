"""Point-to-point communication across the ranks of a job: every send paired with its recv.

A p2p kernel carries the sends and recvs that issued it (tracelint.trace.job.communication: ``record_param_comms`` ops
with ``Dst Rank`` / ``Src Rank``, one kernel per batch). NCCL delivers the messages between two ranks of a group in the
order they were posted, so within one process group and one ProfilerStep, the n-th send from rank a to rank b is
the n-th recv of rank b from rank a. A pair is kept when the two message sizes agree (``In msg nelems``, where both
give one); from the first position where they do not, the rest of that sequence is left unpaired. Sends and recvs
that cannot be paired — their peer's trace was not read, the counts differ, the sizes disagree — are reported with
the reason (``p2p_unmatched``, and the job summary's note), never dropped in silence.

For each pair, the later of the two starts is when both sides are there: from it to a kernel's end is transfer, and
the time before it is that side's wait for its peer (tracelint.trace.job.process_groups measures the waits as a union,
since a batched kernel may carry a send and a recv of two pairs).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from tracelint.trace.job.communication import RECV, SEND

if TYPE_CHECKING:
    from tracelint.trace.job.rank_digest import Collective, RankDigest


class Pair(NamedTuple):
    sender: int
    receiver: int
    send: Collective  # the kernels that carry the send and the recv
    recv: Collective
    group: tuple  # the process group's key (name, ranks)
    step: int | None  # ProfilerStep number
    nelems: int | None


class Unpaired(NamedTuple):
    """Sends (or recvs) of one rank to (from) one peer in one step that have no counterpart."""

    rank: int
    peer: int
    kind: str  # SEND or RECV
    step: int | None
    count: int
    why: str

    def __str__(self) -> str:
        arrow = f"rank {self.rank} → rank {self.peer}" if self.kind == SEND else f"rank {self.peer} → rank {self.rank}"
        what = f"{self.count} {self.kind}{'s' if self.count != 1 else ''}"
        step = f" in step {self.step}" if self.step is not None else ""
        return f"{what} {arrow}{step}: {self.why}"


def pair(ranks: dict[int, RankDigest]) -> tuple[list[Pair], list[Unpaired]]:
    """The pairs of the job's sends and recvs, and what could not be paired (module docstring)."""
    posted: dict[tuple, list[tuple[Collective, int | None]]] = {}  # (kind, group, src, dst, step) -> in order
    for rank, d in ranks.items():
        for c in d.comm:
            for op in c.p2p:
                src, dst = (rank, op.peer) if op.kind == SEND else (op.peer, rank)
                posted.setdefault((op.kind, c.group_key, src, dst, c.step), []).append((c, op.nelems))
    pairs: list[Pair] = []
    unpaired: list[Unpaired] = []
    for (kind, group, src, dst, step), sends in posted.items():
        if kind != SEND:
            continue
        recvs = posted.get((RECV, group, src, dst, step), [])
        n = 0
        for (s, size), (r, other) in zip(sends, recvs, strict=False):
            if size is not None and other is not None and size != other:
                break
            pairs.append(Pair(src, dst, s, r, group, step, size if size is not None else other))
            n += 1
        why = (f"rank {dst}'s trace was not read" if dst not in ranks else
               "their message sizes disagree" if n < min(len(sends), len(recvs)) else
               f"{len(sends)} sends and {len(recvs)} recvs")
        if len(sends) > n:
            unpaired.append(Unpaired(src, dst, SEND, step, len(sends) - n, why))
        if len(recvs) > n:
            unpaired.append(Unpaired(dst, src, RECV, step, len(recvs) - n, why))
    for (kind, group, src, dst, step), recvs in posted.items():
        if kind == RECV and (SEND, group, src, dst, step) not in posted:
            why = f"rank {src}'s trace was not read" if src not in ranks else f"rank {src} sent none in that step"
            unpaired.append(Unpaired(dst, src, RECV, step, len(recvs), why))
    unpaired.sort(key=lambda u: (u.step is None, u.step, u.rank, u.peer, u.kind))
    return pairs, unpaired
