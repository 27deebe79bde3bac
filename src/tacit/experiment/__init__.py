"""Live and simulated experiments that reproduce the papers' setups.

- :mod:`~.asymmetric`: Pirate §5.1, asymmetric routing and a CPU-limited server in namespaces.
- :mod:`~.quic`: Pirate §5.7's HTTP/3 server and clients (aioquic), a server kind of the above.
- :mod:`~.web`: Pirate on loopback web and memcached clients.
- :mod:`~.loadbalancer`: Pirate §4's latency-aware Maglev, simulated.
- :mod:`~.netns`: RDA §IX, two live agents across an impaired path.
- :mod:`~.traced_app`: a small multi-service app in namespaces, captured, its call logs the truth.
- :mod:`~.capture`: tcpdump for all of them.

The names below are imported on first use (PEP 562): the experiments start helper processes
from modules of this package (``python -m tacit.experiment.impair``), which should not pay for
importing every experiment.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tacit.experiment.asymmetric import AsymmetricParams, run_asymmetric_experiment
    from tacit.experiment.capture import Capture, capture_unavailable
    from tacit.experiment.loadbalancer import LoadBalancerParams, run_loadbalancer_experiment
    from tacit.experiment.netns import NetnsParams, run_netns_experiment
    from tacit.experiment.traced_app import (
        TracedAppParams,
        TracedAppResult,
        run_traced_app,
        traced_app_unavailable,
    )
    from tacit.experiment.web import run_web_experiment

_MODULES = {
    "AsymmetricParams": "asymmetric",
    "run_asymmetric_experiment": "asymmetric",
    "Capture": "capture",
    "capture_unavailable": "capture",
    "LoadBalancerParams": "loadbalancer",
    "run_loadbalancer_experiment": "loadbalancer",
    "NetnsParams": "netns",
    "run_netns_experiment": "netns",
    "TracedAppParams": "traced_app",
    "TracedAppResult": "traced_app",
    "run_traced_app": "traced_app",
    "traced_app_unavailable": "traced_app",
    "run_web_experiment": "web",
}

__all__ = [
    "AsymmetricParams",
    "Capture",
    "LoadBalancerParams",
    "NetnsParams",
    "TracedAppParams",
    "TracedAppResult",
    "capture_unavailable",
    "run_asymmetric_experiment",
    "run_loadbalancer_experiment",
    "run_netns_experiment",
    "run_traced_app",
    "run_web_experiment",
    "traced_app_unavailable",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)


def __dir__() -> list[str]:
    return __all__
