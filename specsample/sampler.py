"""The public samplers: ``specsample.rejection_sample`` (mrv2), ``rejection_sample_fast``,
``rejection_sample_express`` (its own random stream) and the benchmark-only pre-#50939
replica. Each validates its arguments in one place (:mod:`specsample.validation`) before any
kernel launches."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch

from .kernels import express, fast, mrv2, pre50939
from .validation import check_inputs


def rejection_sample(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor | None,
    draft_sampled: torch.Tensor,
    cu_num_logits: torch.Tensor,
    pos: torch.Tensor,
    idx_mapping: torch.Tensor,
    expanded_idx_mapping: torch.Tensor,
    expanded_local_pos: torch.Tensor,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    num_speculative_steps: int,
    *,
    synthetic_conditional_rates: torch.Tensor | None = None,
    use_fp64: bool = False,
    use_block_verification: bool = False,
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify speculative drafts and sample one recovered or bonus token per request.

    vLLM Model Runner V2's rejection sampler with PR #50939's placeholder fix, as six Triton
    kernels (``specsample/kernels/mrv2/``). Standard verification follows Leviathan et al.
    (arXiv 2211.17192); ``use_block_verification`` follows Sun et al. (arXiv 2403.10444).

    All tensors live on one device (CUDA; CPU only under ``TRITON_INTERPRET=1``); 1-D tensors
    must be contiguous, 2-D/3-D logits need last-dimension stride 1 (rows may be padded).

    Parameters
    ----------
    target_logits : torch.Tensor
        ``(num_logits, V)`` fp32/bf16/fp16, last stride 1. Target logits after the sampling
        parameters (already divided by the temperature). Request ``r`` owns rows
        ``cu_num_logits[r]:cu_num_logits[r+1]``; its last row is the bonus row.
    draft_logits : torch.Tensor or None
        ``(max_num_reqs, K, V_d)`` in the draft's LM-head dtype, *before* temperature (divided
        by ``T`` on load). ``None`` means one-hot drafts (``q(d) = 1``). ``V := min(V, V_d)``.
    draft_sampled : torch.Tensor
        ``(num_logits,)`` int32/int64. Row ``c_r + j`` holds input token ``x_j``: the anchor at
        ``j = 0``, then drafts ``d_1..d_n``. ``-1`` is a placeholder: never accepted, and nothing
        after it is accepted.
    cu_num_logits : torch.Tensor
        ``(num_reqs + 1,)`` int32 prefix sums of rows per request.
    pos : torch.Tensor
        ``(num_logits,)`` absolute position of each row's input token; the RNG counter.
    idx_mapping : torch.Tensor
        ``(num_reqs,)`` int32 request -> request-state slot.
    expanded_idx_mapping, expanded_local_pos : torch.Tensor
        ``(num_logits,)`` int32 row -> slot and row -> local position ``j``.
    temperature : torch.Tensor
        ``(max_num_reqs,)`` fp32 per slot; ``0`` means greedy. Mixed values are allowed.
    seed : torch.Tensor
        ``(max_num_reqs,)`` int64 per-slot Philox seed.
    num_speculative_steps : int
        ``K``, the largest number of drafts per request.
    synthetic_conditional_rates : torch.Tensor, optional
        ``(K,)`` fp32: accept step ``i`` with probability ``rate[i]`` (benchmarking mode; not
        with block verification).
    use_fp64 : bool
        fp64 Gumbel noise and block maxima in the resample step.
    use_block_verification : bool
        Block verification for non-greedy requests.
    validate : bool
        Check every argument first (one host read-back). Turn off only for inputs already
        checked, e.g. inside timed loops.

    Returns
    -------
    sampled : torch.Tensor
        ``(num_reqs, K + 1)`` int64. Only ``sampled[r, :num_sampled[r]]`` is defined: accepted
        drafts, then the recovered or bonus token.
    num_sampled : torch.Tensor
        ``(num_reqs,)`` int32: accepted drafts + 1.

    Raises
    ------
    ValueError
        Naming the argument, for a bad shape, dtype, device, token id, prefix sum, temperature
        or rate, before any kernel is launched.

    Examples
    --------
    >>> from specsample.workloads import Workload, make_inputs
    >>> inputs = make_inputs(Workload(num_reqs=4, vocab_size=1000), device="cuda")
    >>> sampled, num_sampled = rejection_sample(**inputs)
    """
    return checked_launch(dict(locals()))


def rejection_sample_fast(*args, config: fast.Config | None = None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``fast`` sampler (:mod:`specsample.kernels.fast`): the arguments, validation, outputs
    and random draws of :func:`rejection_sample` (see there), plus ``config`` (default: by R)."""
    return checked_launch(bind_arguments(args, kwargs), launch=functools.partial(fast.launch, config=config))


def rejection_sample_express(
    *args, config: express.Config | None = None, skip_masked_vocab_blocks: bool = False, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``express`` sampler (:mod:`specsample.kernels.express`): the arguments, validation,
    outputs and acceptance decisions of :func:`rejection_sample` (see there), plus ``config``
    (launch geometry only; default: by R) and ``skip_masked_vocab_blocks`` (vLLM's masked-block
    skip: vocabulary blocks whose target logits are all ``-inf`` are skipped; the same draws).
    Its own random stream: the recovered / bonus token is drawn by two-level inverse-transform
    sampling, exact in distribution and reproduced draw for draw by
    :mod:`specsample.reference.express`, not by mrv2's Gumbel noise; ``use_fp64`` has no effect."""
    if not isinstance(skip_masked_vocab_blocks, bool):
        raise ValueError(f"skip_masked_vocab_blocks: expected a bool, got {type(skip_masked_vocab_blocks).__name__}")
    launch = functools.partial(express.launch, config=config, skip_masked_vocab_blocks=skip_masked_vocab_blocks)
    return checked_launch(bind_arguments(args, kwargs), launch=launch)


def rejection_sample_pre50939(*args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """BENCHMARKING ONLY: the pre-#50939 replica (:mod:`specsample.kernels.pre50939`), with the
    arguments, validation and outputs of :func:`rejection_sample` (see there)."""
    return checked_launch(bind_arguments(args, kwargs), launch=pre50939.launch)


def checked_launch(arguments: dict, *, launch: Callable[..., tuple] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate ``arguments`` (those of :func:`rejection_sample`; skipped when ``validate`` is
    False) and run ``launch`` (a kernel module's ``launch``; default ``mrv2.launch``, looked up at
    call time)."""
    args = dict(arguments)
    if args.pop("validate", True):
        check_inputs(**args)
    return (launch or mrv2.launch)(**args)


def bind_arguments(args: tuple, kwargs: dict) -> dict:
    """``args``/``kwargs`` of a call with :func:`rejection_sample`'s signature, as one dict with
    the defaults filled in (a ``TypeError`` names a missing or unknown argument)."""
    bound = inspect.signature(rejection_sample).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments
