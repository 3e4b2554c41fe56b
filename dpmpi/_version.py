"""dpmpi's version: the installed distribution's, which meson-python takes from meson.build's
project() (the one place it is written)."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dpmpi")
except PackageNotFoundError:  # not installed (a source tree on sys.path)
    __version__ = "0+unknown"
