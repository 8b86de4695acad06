"""Store: run directories, checkpoints (safetensors + JSON sidecar), atomic I/O, provenance.

Sits above config/tasks/models and below training: training writes checkpoints through it,
every analysis reads run directories through it. Reads are guarded (regular files of bounded
size only), writes atomic; see docs/reliability.md for what that promises.
"""

from mechinterp_icr.store.checkpoint import (  # noqa: F401
    CheckpointData,
    CheckpointError,
    load_checkpoint,
    read_sidecar,
    save_checkpoint,
    verify_checkpoint,
)
from mechinterp_icr.store.io import (  # noqa: F401
    UnsafeFileError,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    read_regular_file,
)
from mechinterp_icr.store.provenance import git_revision, package_versions  # noqa: F401
from mechinterp_icr.store.rundir import (  # noqa: F401
    CheckpointInfo,
    RunDir,
    RunError,
    check_phase_name,
)
