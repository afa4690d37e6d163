"""TEST-ONLY knob: a planted slowdown, for validating the sign-off (``scripts/validate_signoff.py``).

``BALLAST_ITERS > 0`` adds extra arithmetic to the residual-mass kernel of the mrv2 pipeline
(:func:`specsample.kernels.mrv2._residual_mass_kernel`): every ``BALLAST_EVERY``-th program runs
a dependent fp32 loop (``acc = acc * 0.5 + 1``) of that many iterations over a block-sized vector, before the
kernel's early exits (so all-placeholder rows pay it too), and stores the sum, one float per
program, to a scratch buffer so the compiler keeps it. The kernel is launched only for block verification with draft logits, so only those points of
the variants built on :class:`specsample.kernels.mrv2.Pipeline` (:data:`VARIANTS`) get slower;
greedy, standard and one-hot points are the controls. The sampler's outputs are bit-identical
with the knob on or off. At 0 (the committed value) the loop is compiled out: the kernel is the
same as without the knob.

:class:`~specsample.kernels.mrv2.Pipeline` reads ``planted.BALLAST_ITERS`` when it is
constructed (a module attribute lookup, not a copy taken at import), so the validation can set
it in-process for calibration and commit other values as planted regressions.
"""

BALLAST_ITERS = 0

# Only every BALLAST_EVERY-th program of the kernel (by row + vocab block) runs the loop. The
# ballast has a fixed cost besides its iterations (the vector, its sum and the store): with every
# program paying it, one iteration already slowed the base point by 4.6% on the H200, so no 3%
# plant could be made; a quarter of the programs brings that step to about a quarter.
BALLAST_EVERY = 4

# Variants whose residual-mass launch is mrv2.Pipeline's, i.e. those the knob slows down.
VARIANTS = ("mrv2", "mrv2-pre50939")
