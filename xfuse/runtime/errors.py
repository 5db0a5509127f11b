"""Errors and warnings that the runtime and the public API show to users (one line each)."""

from __future__ import annotations


class XfuseError(Exception):
    """Base of the errors that xfuse's runtime and API raise on purpose."""


class UnsupportedInputError(XfuseError, TypeError):
    """An input that compiled programs cannot take (sparse, complex, wrong device or count)."""


class ExportError(XfuseError):
    """The model or function could not be imported (torch.export failed)."""


class KernelCacheWarning(UserWarning):
    """A kernel cache entry was corrupt or unreadable and was rebuilt, or the disk is unusable."""


class FallbackWarning(UserWarning):
    """A fusion group could not be compiled and runs eagerly instead (results stay right)."""
