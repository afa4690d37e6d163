"""Input checks for every sampler entry point, in one place.

Each check raises :class:`ValueError` naming the argument and what was expected, before any
kernel is launched. The value checks (token range, prefix sums, temperatures) read the tensors
back to the host once; :func:`specsample.rejection_sample` therefore takes ``validate=False``
for timed loops whose inputs were checked when they were built.
"""

from __future__ import annotations

import os

import torch

INDEX_DTYPES = (torch.int32, torch.int64)
LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _fail(name: str, expected: str, got: object) -> None:
    raise ValueError(f"{name}: expected {expected}, got {got}")


def _check_tensor(name: str, x: object, ndim: int, dtypes: tuple, length: int | None = None) -> None:
    if not isinstance(x, torch.Tensor):
        _fail(name, "a torch.Tensor", type(x).__name__)
    if x.ndim != ndim:
        _fail(name, f"a {ndim}-D tensor", f"{x.ndim}-D with shape {tuple(x.shape)}")
    if x.dtype not in dtypes:
        _fail(name, "dtype in " + ", ".join(str(d).replace("torch.", "") for d in dtypes), x.dtype)
    if length is not None and x.shape[0] != length:
        _fail(name, f"length {length}", f"shape {tuple(x.shape)}")
    if ndim == 1 and not x.is_contiguous():
        # The kernels index every 1-D argument as base + i: a strided or broadcast (stride 0)
        # view would be read at the wrong addresses, or past its storage.
        _fail(name, "a contiguous 1-D tensor (stride 1)", f"stride {x.stride()}")


def check_inputs(
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
    synthetic_conditional_rates: torch.Tensor | None = None,
    use_block_verification: bool = False,
    use_fp64: bool = False,
    require_triton_device: bool = True,
) -> None:
    """Validate the arguments of ``rejection_sample``; raise ``ValueError`` on the first problem."""
    # ---- shapes and dtypes
    _check_tensor("target_logits", target_logits, 2, LOGIT_DTYPES)
    num_logits, vocab_size = target_logits.shape
    if vocab_size < 1:
        _fail("target_logits", "at least 1 token (shape [num_logits, V >= 1])", tuple(target_logits.shape))
    if target_logits.stride(-1) != 1:
        _fail("target_logits", "last-dimension stride 1", target_logits.stride())
    for name, flag in (("use_block_verification", use_block_verification), ("use_fp64", use_fp64)):
        if not isinstance(flag, bool):
            _fail(name, "a bool", type(flag).__name__)
    if (
        isinstance(num_speculative_steps, bool)
        or not isinstance(num_speculative_steps, int)
        or num_speculative_steps < 1
    ):
        _fail("num_speculative_steps", "an int >= 1", num_speculative_steps)
    k = num_speculative_steps
    _check_tensor("temperature", temperature, 1, (torch.float32,))
    max_num_reqs = temperature.shape[0]
    _check_tensor("seed", seed, 1, (torch.int64,), max_num_reqs)
    if draft_logits is not None:
        _check_tensor("draft_logits", draft_logits, 3, LOGIT_DTYPES)
        if draft_logits.shape[0] != max_num_reqs or draft_logits.shape[1] != k:
            _fail("draft_logits", f"shape [max_num_reqs={max_num_reqs}, K={k}, V_d]", tuple(draft_logits.shape))
        if draft_logits.shape[2] < 1:
            _fail("draft_logits", "at least 1 token (shape [max_num_reqs, K, V_d >= 1])", tuple(draft_logits.shape))
        if draft_logits.stride(-1) != 1:
            _fail("draft_logits", "last-dimension stride 1", draft_logits.stride())
        vocab_size = min(vocab_size, draft_logits.shape[2])
    _check_tensor("draft_sampled", draft_sampled, 1, INDEX_DTYPES, num_logits)
    _check_tensor("cu_num_logits", cu_num_logits, 1, INDEX_DTYPES)
    num_reqs = cu_num_logits.shape[0] - 1
    if num_reqs < 0:
        _fail("cu_num_logits", "length num_reqs + 1 >= 1", "length 0")
    _check_tensor("pos", pos, 1, INDEX_DTYPES, num_logits)
    _check_tensor("idx_mapping", idx_mapping, 1, INDEX_DTYPES, num_reqs)
    _check_tensor("expanded_idx_mapping", expanded_idx_mapping, 1, INDEX_DTYPES, num_logits)
    _check_tensor("expanded_local_pos", expanded_local_pos, 1, INDEX_DTYPES, num_logits)
    if synthetic_conditional_rates is not None:
        _check_tensor("synthetic_conditional_rates", synthetic_conditional_rates, 1, (torch.float32,), k)
        if use_block_verification:
            _fail(
                "synthetic_conditional_rates",
                "None under use_block_verification (synthetic mode cannot be combined with block verification)",
                "a tensor",
            )

    # ---- devices
    tensors = {
        "target_logits": target_logits,
        "draft_logits": draft_logits,
        "draft_sampled": draft_sampled,
        "cu_num_logits": cu_num_logits,
        "pos": pos,
        "idx_mapping": idx_mapping,
        "expanded_idx_mapping": expanded_idx_mapping,
        "expanded_local_pos": expanded_local_pos,
        "temperature": temperature,
        "seed": seed,
        "synthetic_conditional_rates": synthetic_conditional_rates,
    }
    device = target_logits.device
    for name, x in tensors.items():
        if x is not None and x.device != device:
            _fail(name, f"a tensor on {device} (the device of target_logits)", x.device)
    if require_triton_device and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        _fail("target_logits", "a CUDA tensor (CPU tensors need TRITON_INTERPRET=1)", device)

    # ---- values (one host read-back of the small metadata)
    cu = cu_num_logits.cpu().tolist()
    if cu[0] != 0:
        _fail("cu_num_logits", "cu_num_logits[0] == 0", cu[0])
    rows = [b - a for a, b in zip(cu, cu[1:])]
    if any(n < 1 for n in rows):
        _fail("cu_num_logits", "strictly increasing prefix sums (every request has its bonus row)", cu)
    if cu[-1] != num_logits:
        _fail("cu_num_logits", f"cu_num_logits[-1] == num_logits == {num_logits}", cu[-1])
    if any(n - 1 > k for n in rows):
        _fail("cu_num_logits", f"at most num_speculative_steps={k} drafts per request", max(rows) - 1)
    if num_logits:
        tokens = draft_sampled.cpu()
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < -1 or hi >= vocab_size:
            _fail("draft_sampled", f"token ids in [-1, {vocab_size})", f"range [{lo}, {hi}]")
        local = expanded_local_pos.cpu()
        expected_local = torch.cat([torch.arange(n) for n in rows]) if rows else local
        if not torch.equal(local.to(torch.int64), expected_local):
            _fail("expanded_local_pos", "the local position of each row within its request", local.tolist()[:16])
    if num_reqs:  # the slot range first, so a bad slot is blamed on idx_mapping itself
        req_slots = idx_mapping.cpu()
        lo, hi = int(req_slots.min()), int(req_slots.max())
        if lo < 0 or hi >= max_num_reqs:
            _fail("idx_mapping", f"slots in [0, {max_num_reqs})", f"range [{lo}, {hi}]")
    if num_logits:
        slots = expanded_idx_mapping.cpu().to(torch.int64)
        expected_slots = torch.repeat_interleave(idx_mapping.cpu().to(torch.int64), torch.tensor(rows))
        if not torch.equal(slots, expected_slots):
            _fail("expanded_idx_mapping", "idx_mapping repeated over each request's rows", slots.tolist()[:16])
    temps = temperature.cpu()
    if not bool(torch.isfinite(temps).all()) or bool((temps < 0).any()):
        _fail("temperature", "finite values >= 0 (0 means greedy)", temps.tolist()[:16])
    if synthetic_conditional_rates is not None:
        rates = synthetic_conditional_rates.cpu()
        if bool(torch.isnan(rates).any()) or bool(((rates < 0) | (rates > 1)).any()):
            _fail("synthetic_conditional_rates", "rates in [0, 1]", rates.tolist())
