"""Readers and writers of what tacit takes in and gives out, one small module per format.

- :mod:`~.span_files`: span files in every supported format (Jaeger, Zipkin, OTLP, CSV, blind
  spans), told apart by content, behind one reader and one writer; its names are exported here.
- :mod:`~.ebpf_spans`, :mod:`~.envoy_access_log`, :mod:`~.rpc_pairing`: spans from per-service
  agents, their RPCs paired.
- :mod:`~.pcap`, :mod:`~.pcap_write`, :mod:`~.live`: packet captures; :mod:`~.connections`,
  :mod:`~.tcp_stream`, :mod:`~.protocols`, :mod:`~.capture_spans`, :mod:`~.capture_stream`:
  spans from the requests and responses in them.
- :mod:`~.strace`, :mod:`~.socketevents`, :mod:`~.messagetable`, :mod:`~.messages_input`:
  socket-call logs and message tables; :mod:`~.syslog`, :mod:`~.journal`: syslogs; :mod:`~.ss`:
  TCP statistics.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
