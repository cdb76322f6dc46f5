"""``import nabla.config as nabla_config``: the original Nabla's settings module, over ours.

Each attribute reads and writes :data:`nabla.core.config.CONFIG` (one setting, two
spellings):

- ``EAGER_MAX_GRAPH`` (bool): build and check each op's backend value at the call
  (``NABLA_EAGER_MAX_GRAPH``); ``nabla_config.EAGER_MAX_GRAPH = True`` switches it on for
  the process, as in the original.
- ``set_backend``, ``get_backend_name``, ``backend``: the backend choice (``nb.set_backend``).

The original kept these per context (``ContextVar``); ours are process-wide, so background
compile workers see the same settings.
"""

from __future__ import annotations

import sys
import types

from .core.config import CONFIG, backend, get_backend_name, set_backend

__all__ = ["backend", "get_backend_name", "set_backend"]  # and EAGER_MAX_GRAPH (a property)


class _ConfigModule(types.ModuleType):
    """This module, with ``EAGER_MAX_GRAPH`` read from and written to ``CONFIG``."""

    @property
    def EAGER_MAX_GRAPH(self) -> bool:  # noqa: N802 - the original's name
        """Whether each op builds and checks its backend value at the call."""
        return CONFIG.eager_graph

    @EAGER_MAX_GRAPH.setter
    def EAGER_MAX_GRAPH(self, value: bool) -> None:  # noqa: N802 - the original's name
        if not isinstance(value, bool | int):
            raise TypeError(f"nabla.config.EAGER_MAX_GRAPH must be a bool, got {value!r}")
        CONFIG.eager_graph = bool(value)


sys.modules[__name__].__class__ = _ConfigModule
