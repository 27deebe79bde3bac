"""Simulated microservice applications under load, with ground-truth traces."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
