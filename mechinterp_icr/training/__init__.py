"""Training: masked-loss loop, schedules, checkpoints (save/load/resume), PGD."""
