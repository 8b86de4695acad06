"""Data-generating processes. Importing this package registers every task config kind."""

import importlib
import importlib.util

from mechinterp_icr.tasks.base import IGNORE, Batch, Task, Vocab  # noqa: F401

# Each task module registers its config kind on import.
for _name in ("induction", "cr", "ir"):
    if importlib.util.find_spec(f"mechinterp_icr.tasks.{_name}") is not None:
        importlib.import_module(f"mechinterp_icr.tasks.{_name}")
