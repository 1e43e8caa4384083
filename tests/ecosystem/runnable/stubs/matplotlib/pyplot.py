"""Every pyplot function, drawing nothing."""

import matplotlib

__getattr__ = matplotlib.__getattr__  # PEP 562: any name pyplot is asked for
