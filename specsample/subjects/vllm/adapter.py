"""Map a workload's inputs onto one vLLM version's ``rejection_sample``, by its signature.

specsample's inputs (:func:`specsample.workloads.make_inputs`) are the arguments of MRV2's
launcher as it stands after PR #50939. Versions differ:

- 0.22.0 to 0.24.0 have no ``use_block_verification``: block mode is skipped there, with that
  reason, and never run as standard mode;
- later versions add the sampler paths of :data:`PATH_ARGUMENTS` (watermarking from 0.30.0,
  FLy from 0.33.0, masked-block skipping from 0.34.0): a version has a path where its signature
  takes every argument of it, and gets them only where the workload turns that path on
  (:func:`specsample.workloads.path_inputs`); a workload that turns on a path the version lacks
  is skipped (:attr:`Capabilities.paths`), never run without it. Any other argument with a
  default is left at it;
- an argument without a default that specsample does not know cannot be filled: the version
  cannot be adapted, a :class:`~specsample.subjects.SubjectError` that names the argument;
- the draft logits come as ``draft_logits``, a tensor ``[max_num_reqs, K, V]`` with one row per
  request state, or (0.34.0 on) as ``draft_logits_cache``, an object whose ``values`` is that
  tensor and whose ``row_mapping`` maps request states to rows for a cache sharded over
  tensor-parallel ranks, ``None`` when it is replicated (rows are request states). By default
  the cache is replicated: :class:`DraftLogitsCache` holds the same tensor, so both layouts
  read the same bytes; a workload with ``draft_cache="sharded"`` passes one rank's rows and
  their mapping (the ``sharded_draft_cache`` path, which only versions with the cache have).

The adapter does not know which temperature convention a version's draft logits follow (before
or after PR #50910 they were expected after or before dividing by T), so draft logits run at
T = 1 only, where the two agree (every tier's workloads are at T = 1).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..base import Capabilities, SubjectError

# The arguments of every MRV2 launcher, which every version must take, and one of DRAFT_LOGITS.
REQUIRED = (
    "target_logits",
    "draft_sampled",
    "cu_num_logits",
    "pos",
    "idx_mapping",
    "expanded_idx_mapping",
    "expanded_local_pos",
    "temperature",
    "seed",
    "num_speculative_steps",
)
DRAFT_LOGITS = ("draft_logits", "draft_logits_cache")
# Arguments specsample can pass where a version takes them, and the mode each one enables.
OPTIONAL = {
    "synthetic_conditional_rates": "synthetic",
    "use_block_verification": "block",
    "use_fp64": None,
}

# The arguments of each sampler path (specsample.schema.PATHS): a version has the path where it
# takes all of them.
PATH_ARGUMENTS = {
    "fly": ("fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k"),
    "watermark": ("contexts", "watermarking", "watermark_key"),
    "skip_masked_vocab_blocks": ("skip_masked_vocab_blocks",),
    "sharded_draft_cache": ("draft_logits_cache",),
}
# specsample's own input names of a sharded cache (specsample.workloads.path_inputs).
SHARDED_INPUTS = ("draft_logits_cache_values", "draft_logits_row_mapping")


@dataclass(frozen=True)
class DraftLogitsCache:
    """What 0.34.0's ``draft_logits_cache`` reads: ``values`` [rows, K, V] and ``row_mapping``
    [max_num_reqs] int32 (a request state's row, -1 where another rank holds it), or None for a
    cache replicated on every rank, whose rows are request states."""

    values: object  # torch.Tensor
    row_mapping: object = None  # torch.Tensor or None


@dataclass(frozen=True)
class Adapter:
    """How to call one version's launcher: the argument names it takes, and what it supports."""

    takes: frozenset[str]
    capabilities: Capabilities
    ignored: tuple[str, ...]  # the version's own arguments, left at their defaults

    def arguments(self, inputs: dict) -> dict:
        """The keyword arguments for this version, from specsample's ``inputs``."""
        args = {k: v for k, v in inputs.items() if k in self.takes}
        sharded = inputs.get("draft_logits_row_mapping") is not None
        if "draft_logits_cache" in self.takes:
            draft = inputs["draft_logits"]
            if sharded:
                args["draft_logits_cache"] = DraftLogitsCache(
                    inputs["draft_logits_cache_values"], inputs["draft_logits_row_mapping"]
                )
            else:
                args["draft_logits_cache"] = None if draft is None else DraftLogitsCache(draft)
        elif sharded:
            raise ValueError("this version has no draft_logits_cache, but the inputs shard the draft logits")
        for name in OPTIONAL:
            if name not in self.takes and inputs.get(name) not in (None, False):
                raise ValueError(f"this version takes no {name}, but the inputs set it")
        for path, names in PATH_ARGUMENTS.items():
            for name in names:
                if name not in self.takes and name in inputs:
                    raise ValueError(f"this version has no {path} path ({name}), but the inputs set it")
        return args


def adapt(fn, label: str) -> Adapter:
    """An :class:`Adapter` for ``fn``'s signature; ``SubjectError`` when it cannot be called."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        raise SubjectError(f"{label}: cannot read rejection_sample's signature ({exc})") from None
    if any(p.kind is p.VAR_POSITIONAL for p in params.values()):
        raise SubjectError(f"{label}: rejection_sample takes *args; its arguments cannot be matched by name")
    missing = [n for n in REQUIRED if n not in params]
    if not any(n in params for n in DRAFT_LOGITS):
        missing.insert(0, " or ".join(DRAFT_LOGITS))
    if missing:
        raise SubjectError(
            f"{label}: rejection_sample takes no {', '.join(missing)}: its signature cannot "
            f"be adapted (it takes {', '.join(params)})"
        )
    paths = tuple(p for p, names in PATH_ARGUMENTS.items() if all(n in params for n in names))
    known = {*REQUIRED, *DRAFT_LOGITS, *OPTIONAL, *(n for p in paths for n in PATH_ARGUMENTS[p])}
    unfillable = [
        n for n, p in params.items() if n not in known and p.default is p.empty and p.kind not in (p.VAR_KEYWORD,)
    ]
    if unfillable:
        raise SubjectError(
            f"{label}: rejection_sample requires {', '.join(unfillable)}, which specsample "
            f"cannot fill: its signature cannot be adapted"
        )
    modes = ["greedy", "standard"]
    for name, mode in OPTIONAL.items():
        if mode and name in params:
            modes.append(mode)
    order = ("greedy", "standard", "block", "synthetic")
    caps = Capabilities(modes=tuple(m for m in order if m in modes), tempered_draft_logits=False, paths=paths)
    ignored = tuple(n for n in params if n not in known and params[n].kind is not params[n].VAR_KEYWORD)
    return Adapter(frozenset(n for n in params if n in known), caps, ignored)
