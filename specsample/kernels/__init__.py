"""Triton kernels. ``mrv2`` holds the pipeline; ``pre50939`` its pre-fix benchmark replica."""

from . import interpreter

interpreter.install()  # numpy 2.4+ under TRITON_INTERPRET=1 (triton-lang/triton#9171)
