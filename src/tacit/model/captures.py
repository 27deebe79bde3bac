"""A capture as read: its packets, what became of every record, and the capture format.

The pcap/pcapng reader (:mod:`tacit.formats.pcap`) and live capture (:mod:`tacit.formats.live`)
return a :class:`PacketRead`; response latency (Pirate) and one-way latency (RDA) take its
packets and carry its accounting, so that every captured record is accounted for: a row of the
table, or a count with the reason it is not one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from tacit.model.packets import PacketPayloads, PacketTable


@dataclass
class PacketAccounting:
    """What became of every record of a capture.

    The buckets (:meth:`buckets`) partition the packet records: ``ip_packets`` became rows;
    ``non_ip`` were another protocol (ARP, LLDP, ...); ``unsupported_link`` had a link type the
    reader does not decode (per link type); ``truncated`` were cut before the end of the fixed
    IP header; ``fragments`` were non-first IP fragments (no transport header to decode);
    ``malformed`` had inconsistent IP or transport headers; ``truncated_file`` is the last record
    (or pcapng block), cut by the end of the file. ``reasons`` breaks every bucket but
    ``ip_packets`` down by reason.

    Beside the buckets: ``truncated_packets`` rows were cut by the snap length (flagged
    ``truncated``), ``first_fragments`` rows are first fragments, ``no_timestamp`` rows came from
    Simple Packet Blocks, and ``blocks`` counts pcapng blocks that hold no packet, by type.
    """

    records: int = 0
    ip_packets: int = 0
    non_ip: int = 0
    unsupported_link: dict[int, int] = field(default_factory=dict)
    truncated: int = 0
    fragments: int = 0
    malformed: int = 0
    truncated_file: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    truncated_packets: int = 0
    first_fragments: int = 0
    no_timestamp: int = 0
    blocks: dict[str, int] = field(default_factory=dict)

    def buckets(self) -> dict[str, int]:
        """Records per bucket; they sum to ``records``."""
        return {
            "ip_packets": self.ip_packets,
            "non_ip": self.non_ip,
            "unsupported_link": sum(self.unsupported_link.values()),
            "truncated": self.truncated,
            "fragments": self.fragments,
            "malformed": self.malformed,
            "truncated_file": self.truncated_file,
        }

    @property
    def unaccounted(self) -> int:
        """Records in no bucket: 0 unless the reader has a bug."""
        return self.records - sum(self.buckets().values())

    def __add__(self, other: PacketAccounting) -> PacketAccounting:
        merged: dict[str, Any] = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            merged[f.name] = _add_counts(a, b) if isinstance(a, dict) else a + b
        return PacketAccounting(**merged)

    def as_dict(self) -> dict:
        """A JSON-ready dict (link types as strings)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["unsupported_link"] = {str(k): v for k, v in self.unsupported_link.items()}
        return d


def _add_counts(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


@dataclass
class PacketRead:
    """The packets of a capture, what became of every record, and the file format; with
    ``payloads``, the captured payload bytes of every row."""

    packets: PacketTable
    accounting: PacketAccounting
    format: str
    payloads: PacketPayloads | None = None
