"""Simulated microservice applications under load, with ground-truth traces."""

from tacit.simulate.app_spec import (
    AppSpec,
    CallSpec,
    EndpointSpec,
    JoinSpec,
    RootSpec,
    ServiceSpec,
    StepSpec,
    load_app,
    parse_app,
)
from tacit.simulate.microservices import load_sweep, simulate

__all__ = [
    "AppSpec",
    "CallSpec",
    "EndpointSpec",
    "JoinSpec",
    "RootSpec",
    "ServiceSpec",
    "StepSpec",
    "load_app",
    "load_sweep",
    "parse_app",
    "simulate",
]
