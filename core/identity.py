"""A replica's identity: one key built from the labels that name it.

A fleet names a replica by labels — on Kubernetes its namespace and pod, elsewhere a job and an
instance. An ``Identity`` is those label names in order; a replica's key is their values joined
by ``/`` (``prod/vllm-7d9f-abc``): unique across namespaces where a pod name alone is not, and
the same string whether it is read from a record's ``replica`` or built from a Prometheus
series' labels. Pure, light (the standard library only): the serving side imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT", "SEPARATOR", "Identity", "IdentityError", "from_environment"]

SEPARATOR = "/"


class IdentityError(ValueError):
    """Label names that cannot make a key, or a series missing one of them; names which."""


@dataclass(frozen=True, slots=True)
class Identity:
    """The ordered label names whose values, joined by ``/``, are a replica's key."""

    labels: tuple[str, ...] = ("namespace", "pod")

    def __post_init__(self) -> None:
        if not self.labels:
            raise IdentityError("a replica identity needs at least one label name")
        for name in self.labels:
            if not name.isidentifier() or name.startswith("__"):
                raise IdentityError(f"{name!r} is not a Prometheus label name")
        if len(set(self.labels)) != len(self.labels):
            raise IdentityError(f"label named twice in {','.join(self.labels)}")

    @classmethod
    def parse(cls, text: str) -> Identity:
        """``namespace,pod`` (comma-separated label names) as an identity."""
        return cls(tuple(part.strip() for part in text.split(",") if part.strip()))

    def key(self, labels: Mapping[str, str]) -> str:
        """The key of the replica these ``labels`` (one series' or one process's) name."""
        missing = [n for n in self.labels if not labels.get(n)]
        if missing:
            raise IdentityError(f"no {', '.join(missing)} label to name the replica by")
        return SEPARATOR.join(labels[n] for n in self.labels)


DEFAULT = Identity()
"""``namespace/pod``: Kubernetes' names, what a fleet's Prometheus scrape config attaches."""


def from_environment(env: Mapping[str, str]) -> str | None:
    """This process's key under ``DEFAULT`` from Kubernetes' downward API (``POD_NAMESPACE``
    and ``POD_NAME``, the names its documentation uses), or None outside a pod."""
    namespace, pod = env.get("POD_NAMESPACE", "").strip(), env.get("POD_NAME", "").strip()
    if not namespace or not pod:
        return None
    return DEFAULT.key({"namespace": namespace, "pod": pod})
