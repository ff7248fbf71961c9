"""Where an alert's links point: the runbook pages, the Grafana that holds the dashboards, and the
Prometheus the outlier command should query.

Set once, in the labels file every generator reads (``--labels FILE``)::

    links:
      runbooks: https://git.example.com/sre/fleetwatch/-/blob/main/runbooks
      grafana: https://grafana.example.com
      prometheus: https://prometheus.example.com

Set, every ``runbook_url`` and ``dashboard_url`` is absolute. Unset, the links are relative
(``runbooks/kv-cache-pressure.md``, ``/d/<uid>?…``) and the command says so in one warning line.
The outlier alert's command names ``prometheus`` when set, else the evaluating server's own
``{{ $externalURL }}``. Pure and light: the standard library only.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_RUNBOOKS", "Links", "LinksError", "links_from_mapping"]

DEFAULT_RUNBOOKS = "runbooks"
"""The relative base of runbook links when none is set (the repository's ``runbooks/``)."""

_KEYS = ("runbooks", "grafana", "prometheus")


class LinksError(ValueError):
    """A links setting that is not an absolute URL, named with where it was found."""


def _url(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise LinksError(f"{where}: links.{key}: expected a URL, got {value!r}")
    text = value.strip()
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https", "file") or (
        parts.scheme != "file" and not parts.netloc
    ):
        raise LinksError(f"{where}: links.{key}: {text!r} is not an absolute http(s) or file URL")
    if parts.query or parts.fragment:
        raise LinksError(f"{where}: links.{key}: {text!r}: a base URL takes no query or fragment")
    return text.rstrip("/")


@dataclass(frozen=True, slots=True)
class Links:
    """Absolute base URLs, or None where unset."""

    runbooks: str | None = None
    grafana: str | None = None
    prometheus: str | None = None

    def runbook(self, page: str) -> str:
        """The link to runbook ``page`` (a file name under ``runbooks/``)."""
        return f"{self.runbooks or DEFAULT_RUNBOOKS}/{page}"

    def dashboard(self, uid: str, variables: Mapping[str, str] = {}) -> str:
        """The link to the dashboard ``uid`` with its variables set; a value may be a template
        (``{{ $labels.pod | urlquery }}``), so values are not escaped here."""
        query = "&".join(f"var-{k}={v}" for k, v in variables.items())
        return f"{self.grafana or ''}/d/{uid}" + (f"?{query}" if query else "")

    def outliers_url(self) -> str:
        """The Prometheus URL the outlier alert's command names."""
        return self.prometheus or "{{ $externalURL }}"

    def warning(self) -> str | None:
        """One line when a link base is unset (the generated links are then relative)."""
        missing = [k for k in ("runbooks", "grafana") if getattr(self, k) is None]
        if not missing:
            return None
        return (
            f"warning: no links.{' or links.'.join(missing)} in the labels file (--labels): "
            "runbook and dashboard links are relative"
        )


def links_from_mapping(data: Any, where: str) -> Links:
    """The ``links`` mapping of a labels file; ``where`` names the file in errors."""
    if data is None:
        return Links()
    if not isinstance(data, Mapping):
        raise LinksError(f"{where}: links: expected a mapping of {', '.join(_KEYS)}")
    unknown = [k for k in data if k not in _KEYS]
    if unknown:
        raise LinksError(f"{where}: links: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    return Links(**{k: _url(data[k], k, where) for k in _KEYS if data.get(k) is not None})
