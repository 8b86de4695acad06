"""Data-generating processes. Importing this package registers every task config kind."""

from mechinterp_icr.tasks import cr, induction, ir  # noqa: F401  (each registers its kind)
from mechinterp_icr.tasks.base import IGNORE, Batch, Task, Vocab  # noqa: F401
