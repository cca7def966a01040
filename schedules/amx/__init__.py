"""Schedules on the AMX matrix engine (Intel AMX: `tdpbf16ps` for bf16, `tdpbusd` for u8 x s8):
a block of C summed over the whole reduction (or one group of it) by one tile program per
parallel task, stored to a stack tile that the fused epilogue reads in AVX-512.

- `machine`: the products, a program's tile registers (at most 8: A + B + C tiles) and their
  one numbering, and the machines a program is built for: the hardware's tile instructions, or
  their emulation in scalar TIR, which runs on any host (`machine.emulated_tiles`).
- `dense`: dense layers' tile programs and schedules.
- `conv`: NCHW{c}c convs' tile programs and schedule.

Which shapes fit the tiles, and the OS's permission to run them, are the compute side's
(`tvm_fuse.amx`). Shapes differ per layer and a program covers all of the reduction, so each
(kind, tiles, shape) is registered as a tensor intrinsic on first use.
"""

from . import conv, dense, machine

__all__ = ["conv", "dense", "machine"]
