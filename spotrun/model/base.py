"""The base of spotrun's pydantic models: each is built on its first use, not when its module is imported.

pydantic builds a model's validator and serializer when its class is defined unless ``defer_build`` is set; then
they are built on the first validation, serialization or schema request
(https://docs.pydantic.dev/latest/api/config/#pydantic.config.ConfigDict.defer_build). A Lambda function imports
dozens of models (the job record embeds the manifest) and validates a few: built at import, they were the
largest share of every handler's cold start, and a model built eagerly also rebuilt the schemas of the models it
nests. Deferred, a function builds the job's schema once, on the first job it loads, and never the others.

Every model of ``spotrun.model``, ``spotrun.control``, ``spotrun.aws`` and ``functions`` derives from
:class:`DeferredModel` (``tests/unit/test_cold_start.py`` fails when one built at a handler's import).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, RootModel

T = TypeVar("T")


class DeferredModel(BaseModel):
    """A pydantic model whose schema, validator and serializer are built on first use."""

    model_config = ConfigDict(defer_build=True)


class DeferredRootModel(RootModel[T], Generic[T]):
    """A pydantic root model built on first use; parametrize it (``DeferredRootModel[X]``) as ``RootModel``.

    Subclassing ``RootModel[X]`` directly builds the parametrized class ``RootModel[X]`` at import, with its
    schema of ``X``; this one's parametrized classes inherit ``defer_build``.
    """

    model_config = ConfigDict(defer_build=True)


class RecordModel(DeferredModel):
    """A part of the job record as stored: fields a newer writer added are ignored, not refused.

    Records outlive the code that wrote them (DynamoDB keeps them across deployments), so a reader of an older
    version must still read a newer record.
    """

    model_config = ConfigDict(extra="ignore")
