"""Plain data types through which tacit's stages talk to each other."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
