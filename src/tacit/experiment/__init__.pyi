"""The names :mod:`tacit.experiment` exports, each imported on first use (``__init__.py``)."""

from .asymmetric import AsymmetricParams, run_asymmetric_experiment
from .capture import Capture, capture_unavailable
from .loadbalancer import LoadBalancerParams, run_loadbalancer_experiment
from .netns import NetnsParams, run_netns_experiment
from .otel_app import OtelAppParams, OtelAppResult, otel_app_unavailable, run_otel_app
from .otlp_receiver import OtlpReceiver
from .traced_app import TracedAppParams, TracedAppResult, run_traced_app, traced_app_unavailable
from .web import run_web_experiment

__all__ = [
    "AsymmetricParams",
    "Capture",
    "LoadBalancerParams",
    "NetnsParams",
    "OtelAppParams",
    "OtelAppResult",
    "OtlpReceiver",
    "TracedAppParams",
    "TracedAppResult",
    "capture_unavailable",
    "otel_app_unavailable",
    "run_asymmetric_experiment",
    "run_loadbalancer_experiment",
    "run_netns_experiment",
    "run_otel_app",
    "run_traced_app",
    "run_web_experiment",
    "traced_app_unavailable",
]
