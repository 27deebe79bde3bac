"""Device syslog records as columns: what YTrace's network diagnosis works on.

YTrace (Kanuparthy et al., arXiv 1602.03273, §4 "network") diagnoses the network from the
syslogs of its devices. One record is one log line: its time, the device that logged it, the
emitting application and the message. The readers of :mod:`tacit.formats.syslog` read the
supported syslog formats into :class:`SyslogRecords`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SyslogRecords:
    """One row per parsed line: ``time`` (ns), ``device`` (code into ``devices``), the message
    ``content`` (after the header), the emitting ``app``, and the 1-based ``line`` in its file
    (``file``: index into ``files``)."""

    time: np.ndarray
    device: np.ndarray
    devices: list[str]
    content: list[str]
    app: list[str]
    line: np.ndarray
    file: np.ndarray
    files: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.time)

    def device_names(self) -> np.ndarray:
        """The device name of every row."""
        return np.asarray(self.devices, dtype=object)[self.device]
