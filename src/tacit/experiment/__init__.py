"""Live and simulated experiments that reproduce the papers' setups.

- :mod:`~.asymmetric`: Pirate §5.1, asymmetric routing and a CPU-limited server in namespaces.
- :mod:`~.quic`: Pirate §5.7's HTTP/3 server and clients (aioquic), a server kind of the above.
- :mod:`~.web`: Pirate on loopback web and memcached clients.
- :mod:`~.loadbalancer`: Pirate §4's latency-aware Maglev, simulated.
- :mod:`~.netns`: RDA §IX, two live agents across an impaired path.
- :mod:`~.traced_app`: a small multi-service app in namespaces, captured, its call logs the truth.
- :mod:`~.otel_app`: a small app of services instrumented with the OpenTelemetry SDK, its trace
  context broken as deployments break it, its own logs the truth.
- :mod:`~.capture`: tcpdump for all of them.

The names the package exports are imported on first use, as in every package of tacit: the
experiments start helper processes from modules of this package (``python -m
tacit.experiment.impair``), which should not pay for importing every experiment.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
