"""Triton kernels. ``mrv2`` holds the pipeline; ``pre50939`` its pre-fix benchmark replica."""
