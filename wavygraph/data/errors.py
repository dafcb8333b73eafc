"""Errors of the data layer; each carries a one-line message for the CLI."""
from __future__ import annotations


class WavygraphDataError(ValueError):
    """Base class of every data set error raised by :mod:`wavygraph.data`."""


class UnknownDatasetError(WavygraphDataError):
    """The name is not in :data:`wavygraph.data.DATASETS`."""


class DatasetNotFoundError(WavygraphDataError):
    """The files of a data set are not under ``data.root`` (and wavygraph
    does not download): the message says which files to put where."""


class InvalidDataError(WavygraphDataError):
    """A loaded or given data set is malformed (shapes, index ranges, NaN
    features, labels out of range): the message names the field and the fix."""
