"""Run frameworks written for GPUs on a CPU-only machine under graphguard's capture, without changing their
maths: one module per framework (:mod:`.megatron`). Each patch is documented where it is made, with why the
computed values stay the same."""
