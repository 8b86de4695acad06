"""Store: run directories, checkpoints (safetensors + JSON sidecar), atomic I/O, provenance.

Sits above config/tasks/models and below training: training writes checkpoints through it,
every analysis reads run directories through it. Reads are guarded (regular files of bounded
size only), writes atomic; see docs/reliability.md for what that promises. Import the
submodules (``store.checkpoint``, ``store.io``, ``store.rundir``, ``store.provenance``): the
package imports nothing itself, so reading JSON records never loads torch.
"""
