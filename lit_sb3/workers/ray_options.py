"""The Ray actor options of a worker, from the resources a user asks for: checked without importing Ray."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lit_sb3.checks import check_non_negative_number

#: Keys of ``worker_resources`` that are Ray's own actor options; any other key is a custom resource.
RAY_RESOURCE_OPTIONS = ("num_cpus", "num_gpus", "memory")
#: Names of Ray's own resources that ``worker_resources`` spells otherwise, and how.
OTHER_SPELLINGS = {
    "CPU": "give CPUs as 'num_cpus'",
    "GPU": "give GPUs as 'num_gpus'",
    "object_store_memory": "the object store is the node's, not an actor's resource",
}
#: The smallest amount of a resource Ray tells from none.
RESOURCE_RESOLUTION = 1e-4


def actor_options(worker_resources: Mapping[str, float] | None) -> dict[str, Any]:
    """
    :param worker_resources: Resources of each worker: ``num_cpus`` (1 by default), ``num_gpus``, ``memory`` and
        custom resources by name.
    :return: The matching options of a Ray actor.
    :raises TypeError: if ``worker_resources`` is not a mapping of resource names to numbers.
    :raises ValueError: if an amount is negative or finer than Ray counts, or a name is Ray's own spelled otherwise.
    """
    if worker_resources is not None and not isinstance(worker_resources, Mapping):
        raise TypeError(f"worker_resources must be a mapping of resource names to amounts, got {worker_resources!r}")
    options: dict[str, Any] = {}
    custom: dict[str, float] = {}
    for name, amount in {"num_cpus": 1, **(worker_resources or {})}.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"worker_resources keys must be resource names, got {name!r}")
        check_non_negative_number(f"worker_resources[{name!r}]", amount)
        if name in OTHER_SPELLINGS:
            raise ValueError(f"worker_resources[{name!r}]: {OTHER_SPELLINGS[name]}")
        if 0 < amount < RESOURCE_RESOLUTION:
            raise ValueError(
                f"worker_resources[{name!r}] is {amount!r}, finer than Ray counts resources ({RESOURCE_RESOLUTION})"
            )
        if name in RAY_RESOURCE_OPTIONS:
            options[name] = amount
        else:
            custom[name] = amount
    if custom:
        options["resources"] = custom
    return options
