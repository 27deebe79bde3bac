"""Simulated microservice applications under load, with ground-truth traces."""

from tacit.simulate.microservices import (
    AppSpec,
    CallSpec,
    EndpointSpec,
    RootSpec,
    ServiceSpec,
    StepSpec,
    load_app,
    load_sweep,
    parse_app,
    simulate,
)

__all__ = [
    "AppSpec",
    "CallSpec",
    "EndpointSpec",
    "RootSpec",
    "ServiceSpec",
    "StepSpec",
    "load_app",
    "load_sweep",
    "parse_app",
    "simulate",
]
