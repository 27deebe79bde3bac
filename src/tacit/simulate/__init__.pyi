"""The names :mod:`tacit.simulate` exports, each imported on first use (``__init__.py``)."""

from .app_spec import (
    AppSpec,
    CallSpec,
    EndpointSpec,
    JoinSpec,
    RootSpec,
    ServiceSpec,
    SlowdownSpec,
    StepSpec,
    load_app,
    parse_app,
    scale_out,
    slow_down,
)
from .microservices import load_sweep, simulate

__all__ = [
    "AppSpec",
    "CallSpec",
    "EndpointSpec",
    "JoinSpec",
    "RootSpec",
    "ServiceSpec",
    "SlowdownSpec",
    "StepSpec",
    "load_app",
    "load_sweep",
    "parse_app",
    "scale_out",
    "simulate",
    "slow_down",
]
