"""The release, apart from everything else: the cache keys its entries with it and the build
reads it without importing the package."""

__version__ = "0.1.0"
