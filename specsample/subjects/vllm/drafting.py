"""A vLLM release's own drafting sampler: ``gumbel_sample``, as its speculators call it.

vLLM's speculators draw each draft token with ``gumbel_sample`` (module
``vllm.v1.worker.gpu.sample.gumbel``, which every MRV2 closure already holds, since the
verifier's resample step uses its Gumbel helpers). They pass the request's seed and the position
of the target row that verifies the draft, so the draft's noise sits at the same
``(seed, position)`` as the noise the verifier resamples that row with. Releases from 0.29.0 on
take ``is_drafting``, which offsets the draft's position by a salt so that the two streams are
disjoint; 0.28.0 has no such flag. The draft-logits cache it fills is ``logits_cache`` /
``logits_cache_col`` from 0.28.0 on, ``output_processed_logits`` / ``output_processed_logits_col``
before (0.22.0 to 0.27.1: those store the logits after temperature, the later ones before it; the
exactness check's temperature is 1, where the two are the same values).

:func:`drafting_sampler` loads that function through the same cache entry and namespace
machinery as the subject itself (:func:`specsample.subjects.vllm.entry`, :class:`.Namespace`),
and returns a :class:`DraftingSampler` that fills a trial batch's drafts step by step, the way
the engine would: one call per speculative step, the draft logits written to the cache column of
that step (0.33.0 on mixes the step into the seed when a cache is given).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from ...schema import parse_subject
from ..base import SubjectError
from . import entry, shim
from .loader import Namespace

GUMBEL_MODULE = "vllm.v1.worker.gpu.sample.gumbel"
# The cache's (tensor, column) argument names, newest first.
CACHE_ARGUMENTS = (("logits_cache", "logits_cache_col"), ("output_processed_logits", "output_processed_logits_col"))


@dataclass(frozen=True)
class DraftingSampler:
    """One release's ``gumbel_sample``, whether it takes the drafting flag, and the names of its
    draft-logits cache arguments (one pair of :data:`CACHE_ARGUMENTS`)."""

    name: str
    gumbel_sample: object
    namespace: Namespace
    has_flag: bool
    cache_arguments: tuple[str, str] = CACHE_ARGUMENTS[0]

    def draw(self, inputs: dict, *, unsalted: bool = False) -> None:
        """Draw every draft of ``inputs`` (one trial batch: ``K + 1`` rows per request, draft
        logits for every step) in place into ``inputs["draft_sampled"]``.

        By default the release's production call: ``is_drafting=True`` where it takes the flag,
        no flag where it has none. ``unsalted``: ``is_drafting=False`` (the shared stream), only
        where the release takes the flag.
        """
        if unsalted and not self.has_flag:
            raise ValueError(f"{self.name}: its gumbel_sample takes no is_drafting flag")
        draft_logits = inputs["draft_logits"]  # [max_num_reqs, K, V]
        K = inputs["num_speculative_steps"]
        cu = inputs["cu_num_logits"].to(torch.int64)
        idx_mapping = inputs["idx_mapping"]
        first_rows = cu[:-1]
        for step in range(K):
            rows = first_rows + step  # the target row that verifies this step's draft
            logits = draft_logits[idx_mapping.to(torch.int64), step].contiguous()  # [R, V]
            cache, cache_col = self.cache_arguments
            kwargs = {
                "apply_temperature": True,
                cache: draft_logits,
                cache_col: torch.tensor(step, dtype=torch.int64, device=logits.device),
            }
            if self.has_flag:
                kwargs["is_drafting"] = not unsalted
            with self.namespace.active():
                drawn = self.gumbel_sample(
                    logits,
                    idx_mapping,
                    inputs["temperature"],
                    inputs["seed"],
                    inputs["pos"][rows].contiguous(),
                    **kwargs,
                )
            inputs["draft_sampled"][rows + 1] = drawn.to(torch.int64)


def drafting_sampler(name: str) -> DraftingSampler | None:
    """The drafting sampler of vLLM subject ``name``, or ``None`` where its closure has no
    ``gumbel_sample``. ``SubjectError`` when the entry cannot be loaded."""
    parsed = parse_subject(name)
    found = entry(parsed)
    if GUMBEL_MODULE.replace(".", "/") + ".py" not in set(found.files):
        return None
    shim.check_names(set(found.manifest.get("shim_names", ())), name)
    namespace = Namespace(found.root, found.files, name, found.stand_ins)
    module = namespace.import_module(GUMBEL_MODULE)
    fn = getattr(module, "gumbel_sample", None)
    if not callable(fn):
        return None
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        raise SubjectError(f"{name}: cannot read gumbel_sample's signature ({exc})") from None
    cache_arguments = next((pair for pair in CACHE_ARGUMENTS if set(pair) <= set(params)), None)
    if cache_arguments is None:
        known = " or ".join("/".join(pair) for pair in CACHE_ARGUMENTS)
        raise SubjectError(f"{name}: gumbel_sample takes no draft-logits cache ({known})")
    return DraftingSampler(name, fn, namespace, "is_drafting" in params, cache_arguments)
