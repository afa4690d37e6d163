"""Semantics of the plain-PyTorch reference sampler (:mod:`specsample.reference`), on CPU.

Covers greedy argmax, the post-#50939 placeholder rules (including the truncation invariant of
spec section 5.4), marginal correctness of standard and block verification (chi-square), the
synthetic acceptance rates, NaN safety, and determinism / batch-layout invariance.
"""

import math
import zlib

import pytest
import torch
from batches import emitted

from specsample.reference import rejection_sample

scipy_stats = pytest.importorskip("scipy.stats")

# Chi-square tests: each check rejects at p < ALPHA. There are at most ~40 such checks in this
# file, so with fresh random inputs the chance that any of them fails on a correct sampler is
# below 40 * ALPHA = 4e-4. The inputs are seeded, so the outcome is deterministic.
ALPHA = 1e-5

# ---------------------------------------------------------------------------------------------
# Input builders
# ---------------------------------------------------------------------------------------------


def make_inputs(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor | None,
    drafts: list[list[int]],
    temperature: float | list[float],
    *,
    num_speculative_steps: int,
    seeds: list[int] | None = None,
    pos_start: list[int] | None = None,
    slots: list[int] | None = None,
    max_num_reqs: int | None = None,
) -> dict:
    """Keyword arguments for ``rejection_sample`` from per-request draft lists.

    ``target_logits`` holds the rows of all requests back to back: request ``r`` owns
    ``len(drafts[r]) + 1`` rows. ``draft_logits`` is indexed by slot. The anchor token is 0.
    Temperatures and seeds are per request and scattered to the request's slot.
    """
    num_reqs = len(drafts)
    slots = list(range(num_reqs)) if slots is None else slots
    max_num_reqs = max_num_reqs or (max(slots) + 1)
    counts = [len(d) + 1 for d in drafts]
    cu = [0]
    for cnt in counts:
        cu.append(cu[-1] + cnt)
    assert target_logits.shape[0] == cu[-1]
    seeds = [1000 + 7 * r for r in range(num_reqs)] if seeds is None else seeds
    pos_start = [100 * r + 3 for r in range(num_reqs)] if pos_start is None else pos_start
    temps = [temperature] * num_reqs if isinstance(temperature, (int, float)) else temperature

    draft_sampled, pos, exp_slot, exp_local = [], [], [], []
    for r, d in enumerate(drafts):
        draft_sampled += [0] + list(d)
        pos += [pos_start[r] + j for j in range(len(d) + 1)]
        exp_slot += [slots[r]] * (len(d) + 1)
        exp_local += list(range(len(d) + 1))
    temp_t = torch.zeros(max_num_reqs, dtype=torch.float32)
    seed_t = torch.zeros(max_num_reqs, dtype=torch.int64)
    for r in range(num_reqs):
        temp_t[slots[r]] = temps[r]
        seed_t[slots[r]] = seeds[r]
    return dict(
        target_logits=target_logits,
        draft_logits=draft_logits,
        draft_sampled=torch.tensor(draft_sampled, dtype=torch.int64),
        cu_num_logits=torch.tensor(cu, dtype=torch.int32),
        pos=torch.tensor(pos, dtype=torch.int64),
        idx_mapping=torch.tensor(slots, dtype=torch.int32),
        expanded_idx_mapping=torch.tensor(exp_slot, dtype=torch.int32),
        expanded_local_pos=torch.tensor(exp_local, dtype=torch.int32),
        temperature=temp_t,
        seed=seed_t,
        num_speculative_steps=num_speculative_steps,
    )


def repeated_trials(
    target_row: torch.Tensor,
    draft_row: torch.Tensor | None,
    k: int,
    temperature: float,
    num_trials: int,
    *,
    num_placeholders: int = 0,
    leading_placeholders: int = 0,
    gen_seed: int = 0,
) -> dict:
    """Spec section 7 layout: every trial is one request with K drafts and identical rows.

    ``target_row`` is already divided by T; ``draft_row`` is pre-temperature. Drafts are sampled
    from ``softmax(draft_row / T)`` (or from the target when there are no draft logits). The
    last ``num_placeholders`` and the first ``leading_placeholders`` drafts are set to -1.
    """
    gen = torch.Generator().manual_seed(gen_seed)
    vocab = target_row.numel()
    q = torch.softmax((draft_row if draft_row is not None else target_row * temperature) / temperature, -1)
    tokens = torch.multinomial(q.expand(num_trials, vocab), k, replacement=True, generator=gen)
    if num_placeholders:
        tokens[:, k - num_placeholders :] = -1
    if leading_placeholders:
        tokens[:, :leading_placeholders] = -1
    target = target_row.expand(num_trials * (k + 1), vocab)
    draft = None if draft_row is None else draft_row.expand(num_trials, k, vocab)
    return make_inputs(
        target,
        draft,
        tokens.tolist(),
        temperature,
        num_speculative_steps=k,
        seeds=list(range(num_trials)),
        pos_start=[0] * num_trials,  # distinct seeds make the trials independent
    )


def assert_distribution_match(tokens: torch.Tensor, probs: torch.Tensor) -> None:
    """Chi-square goodness of fit of ``tokens`` to ``probs``; bins with expected < 5 merged."""
    n = tokens.numel()
    if n == 0:
        return
    observed = torch.bincount(tokens, minlength=probs.numel()).double()
    expected = probs.double() * n
    small = expected < 5
    obs = torch.cat([observed[~small], observed[small].sum().reshape(1)])
    exp = torch.cat([expected[~small], expected[small].sum().reshape(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    if obs.numel() < 2:
        return
    stat = float(((obs - exp) ** 2 / exp).sum())
    p_value = float(scipy_stats.chi2.sf(stat, obs.numel() - 1))
    assert p_value > ALPHA, f"chi2={stat:.1f} df={obs.numel() - 1} p={p_value:.2e} (n={n})"


# ---------------------------------------------------------------------------------------------
# Greedy
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_emits_target_argmax(k):
    gen = torch.Generator().manual_seed(k)
    num_reqs, vocab = 200, 32
    target = torch.randn(num_reqs * (k + 1), vocab, generator=gen)
    argmax = target.argmax(-1).view(num_reqs, k + 1)
    # Drafts hit the argmax 70% of the time, so acceptance runs of every length occur.
    hit = torch.rand(num_reqs, k, generator=gen) < 0.7
    rand_tok = torch.randint(0, vocab, (num_reqs, k), generator=gen)
    drafts = torch.where(hit, argmax[:, :k], rand_tok)
    inputs = make_inputs(target, None, drafts.tolist(), 0.0, num_speculative_steps=k)
    sampled, num_sampled = rejection_sample(**inputs)

    accepted = (drafts == argmax[:, :k]).int().cumprod(-1).sum(-1)
    assert torch.equal(num_sampled, (accepted + 1).int())
    for r, toks in enumerate(emitted(sampled, num_sampled)):
        assert toks == argmax[r, : len(toks)].tolist()
    assert set(num_sampled.tolist()) == set(range(1, k + 2))

    # Draft logits, block verification and fp64 do not change the greedy path.
    draft = torch.randn(num_reqs, k, vocab, generator=gen)
    for kwargs in ({"use_block_verification": True}, {"use_fp64": True}):
        s2, n2 = rejection_sample(**{**inputs, "draft_logits": draft}, **kwargs)
        assert torch.equal(n2, num_sampled) and torch.equal(s2, sampled)


def test_greedy_placeholder_emits_target_argmax():
    """Spec test 7: d_1 = argmax, d_2 = d_3 = -1: two tokens, both the row argmax."""
    gen = torch.Generator().manual_seed(7)
    num_reqs, k, vocab = 64, 3, 16
    target = torch.randn(num_reqs * (k + 1), vocab, generator=gen)
    # Make token 0 the argmax of every row: a clamped -1 (-> 0) must still not be accepted.
    target[:, 0] += 10.0
    drafts = [[0, -1, -1] for _ in range(num_reqs)]
    sampled, num_sampled = rejection_sample(**make_inputs(target, None, drafts, 0.0, num_speculative_steps=k))
    assert num_sampled.tolist() == [2] * num_reqs
    assert emitted(sampled, num_sampled) == [[0, 0]] * num_reqs


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_all_nan_target_logits_in_range(temperature):
    k, vocab, num_reqs = 1, 40, 8
    target = torch.full((num_reqs * (k + 1), vocab), float("nan"))
    drafts = [[r % vocab] for r in range(num_reqs)]
    sampled, num_sampled = rejection_sample(**make_inputs(target, None, drafts, temperature, num_speculative_steps=k))
    assert bool(((num_sampled >= 1) & (num_sampled <= k + 1)).all())
    for toks in emitted(sampled, num_sampled):
        assert all(0 <= t < vocab for t in toks)


# ---------------------------------------------------------------------------------------------
# Placeholders (post-#50939)
# ---------------------------------------------------------------------------------------------

MODES = {
    "greedy": dict(temperature=0.0),
    "standard": dict(temperature=0.8),
    "block": dict(temperature=0.8, use_block_verification=True),
    "synthetic": dict(temperature=0.8, synthetic=True),
    "synthetic_greedy": dict(temperature=0.0, synthetic=True),
}


def _peaked_case(num_reqs: int, k: int, vocab: int, temperature: float, seed: int):
    """Target rows and draft logits close to each other, with drafts sampled from the draft.

    Acceptance is high, so long accepted prefixes (and the placeholder boundary) are exercised.
    Returns ``target [R*(K+1), V]`` (already / T), ``draft [R, K, V]`` (pre-T) and the draft
    tokens ``[R, K]`` drawn from the draft distribution (one-hot mode uses the same tokens).
    """
    gen = torch.Generator().manual_seed(seed)
    base = 3.0 * torch.randn(num_reqs, k + 1, vocab, generator=gen)
    target = (base + 0.3 * torch.randn(base.shape, generator=gen)).view(-1, vocab)
    t = temperature if temperature > 0 else 1.0
    draft = base[:, :k] * t  # pre-temperature: draft / T == base
    probs = torch.softmax(base[:, :k], -1).reshape(-1, vocab)
    tokens = torch.multinomial(probs, 1, generator=gen).view(num_reqs, k)
    if temperature == 0.0:
        # Greedy: drafts equal to the target argmax most of the time.
        hit = torch.rand(num_reqs, k, generator=gen) < 0.8
        tokens = torch.where(hit, target.view(num_reqs, k + 1, vocab)[:, :k].argmax(-1), tokens)
    return target, draft, tokens


@pytest.mark.parametrize("pattern", ["trailing", "middle"])
@pytest.mark.parametrize("has_draft_logits", [False, True])
@pytest.mark.parametrize("mode", list(MODES))
def test_truncation_invariant(mode, has_draft_logits, pattern):
    """Spec 5.4: m valid drafts then -1 give exactly the output of the request cut to m drafts.

    "middle" puts valid drafts after the first -1 as well; none of them may be looked at.
    """
    cfg = MODES[mode]
    k, vocab, num_reqs = 4, 24, 60
    temperature = cfg["temperature"]
    target, draft, tokens = _peaked_case(num_reqs, k, vocab, temperature, seed=11)
    draft = draft if has_draft_logits else None
    extra = {"use_block_verification": cfg.get("use_block_verification", False)}
    if cfg.get("synthetic"):
        extra["synthetic_conditional_rates"] = torch.tensor([0.9, 0.8, 0.7, 0.6])

    full_drafts, cut_drafts, cut_rows = [], [], []
    rows = target.view(num_reqs, k + 1, vocab)
    for r in range(num_reqs):
        m = r % (k + 1)  # 0..K valid drafts
        d = tokens[r].tolist()
        full = d[:m] + [-1] * (k - m)
        if pattern == "middle" and m + 1 < k:
            full[m + 1 :] = d[m + 1 :]  # valid drafts after the placeholder
        full_drafts.append(full)
        cut_drafts.append(d[:m])
        cut_rows.append(rows[r, : m + 1])
    seeds = [5 * r + 1 for r in range(num_reqs)]
    pos_start = [37 * r for r in range(num_reqs)]
    common = dict(num_speculative_steps=k, seeds=seeds, pos_start=pos_start)

    full_in = make_inputs(target, draft, full_drafts, temperature, **common)
    cut_in = make_inputs(torch.cat(cut_rows), draft, cut_drafts, temperature, **common)
    for use_fp64 in (False, True):
        s_full, n_full = rejection_sample(**full_in, **extra, use_fp64=use_fp64)
        s_cut, n_cut = rejection_sample(**cut_in, **extra, use_fp64=use_fp64)
        assert torch.equal(n_full, n_cut)
        assert emitted(s_full, n_full) == emitted(s_cut, n_cut)

    # A -1 is never accepted and nothing at or after it is: at most m drafts + 1 token.
    m_r = torch.arange(num_reqs) % (k + 1)
    assert bool((n_full <= m_r + 1).all())
    assert all(t >= 0 for toks in emitted(s_full, n_full) for t in toks)
    # The test is only meaningful if whole valid prefixes do get accepted.
    assert int(((n_full == m_r + 1) & (m_r >= 2)).sum()) >= 5


@pytest.mark.parametrize("use_block_verification", [False, True])
def test_placeholder_blocks_later_draft_tokens(use_block_verification):
    """Spec test 8: target == draft, so every valid draft passes; d_2 = -1 stops the scan."""
    gen = torch.Generator().manual_seed(3)
    num_reqs, k, vocab, temperature = 512, 3, 16, 1.0
    row = torch.randn(vocab, generator=gen)
    inputs = repeated_trials(row, row, k, temperature, num_reqs, gen_seed=3)
    inputs["draft_sampled"].view(num_reqs, k + 1)[:, 2] = -1
    _, num_sampled = rejection_sample(**inputs, use_block_verification=use_block_verification)
    assert bool((num_sampled <= 2).all())
    assert float((num_sampled == 2).float().mean()) > 0.9


def test_all_placeholders_resample_bonus_like_row():
    """K=1 with every draft -1: one token per request, in range (spec test 5)."""
    gen = torch.Generator().manual_seed(5)
    num_reqs, k, vocab = 64, 1, 16
    target = torch.randn(num_reqs * 2, vocab, generator=gen)
    draft = torch.randn(num_reqs, k, vocab, generator=gen)
    for d in (None, draft):
        for block in (False, True):
            sampled, num_sampled = rejection_sample(
                **make_inputs(target, d, [[-1]] * num_reqs, 0.6, num_speculative_steps=k),
                use_block_verification=block,
            )
            assert num_sampled.tolist() == [1] * num_reqs
            assert bool(((sampled[:, 0] >= 0) & (sampled[:, 0] < vocab)).all())


# ---------------------------------------------------------------------------------------------
# Distribution (chi-square)
# ---------------------------------------------------------------------------------------------

CHI2_CASES = {
    # name: (use_block_verification, num_placeholders, leading_placeholders, temperature, fp64)
    "standard": (False, 0, 0, 1.0, False),
    "standard_T0.6_fp64": (False, 0, 0, 0.6, True),
    "block": (True, 0, 0, 1.0, False),
    "block_T0.6": (True, 0, 0, 0.6, False),
    "block_trailing_1": (True, 1, 0, 1.0, False),
    "block_trailing_2": (True, 2, 0, 1.0, False),
    # A placeholder as the first draft: row 0 must be sampled from p, not the residual p - q.
    "standard_leading_placeholder": (False, 0, 1, 1.0, False),
}


@pytest.mark.parametrize("has_draft_logits", [True, False])
@pytest.mark.parametrize("case", list(CHI2_CASES))
def test_emitted_tokens_follow_target(case, has_draft_logits):
    """Every emitted position follows softmax(target) (rows are identical and independent)."""
    block, trailing, leading, temperature, fp64 = CHI2_CASES[case]
    k, vocab, num_trials = 3, 16, 2000
    gen = torch.Generator().manual_seed(zlib.crc32(f"{case}-{has_draft_logits}".encode()))
    target_row = 2.0 * torch.randn(vocab, generator=gen)  # already divided by T
    if not has_draft_logits:
        # One-hot drafts are accepted with probability p(d): one likely token lets them reach
        # the deeper positions often enough to test those too.
        target_row[0] = target_row.max() + 3.0
    # The draft differs from the target enough that rejections (and residuals) are common.
    draft_row = temperature * (target_row + 0.8 * torch.randn(vocab, generator=gen))
    inputs = repeated_trials(
        target_row,
        draft_row if has_draft_logits else None,
        k,
        temperature,
        num_trials,
        num_placeholders=trailing,
        leading_placeholders=leading,
    )
    if not has_draft_logits:
        # One-hot: accepted with probability p(d), so draw drafts from a sharpened target to
        # reach the deeper positions; any draft distribution must leave the marginal at p.
        q = torch.softmax(3.0 * target_row, -1)
        toks = torch.multinomial(q.expand(num_trials, vocab), k, replacement=True, generator=gen)
        ds = inputs["draft_sampled"].view(num_trials, k + 1)
        ds[:, 1:] = torch.where(ds[:, 1:] < 0, -1, toks)
    sampled, num_sampled = rejection_sample(**inputs, use_block_verification=block, use_fp64=fp64)
    num_real = k - trailing if not leading else 0
    assert bool((num_sampled <= num_real + 1).all())
    p = torch.softmax(target_row, -1)
    for j in range(num_real + 1):
        reached = num_sampled > j
        assert_distribution_match(sampled[reached, j], p)
    # Sanity: the deepest position (all valid drafts accepted) was reached and tested.
    assert int((num_sampled > num_real).sum()) >= 30


def test_synthetic_acceptance_rates():
    """P(accepted >= i + 1) equals the product of the conditional rates, greedy or not."""
    k, vocab, num_trials = 3, 8, 3000
    rates = torch.tensor([0.9, 0.5, 0.2])
    unconditional = torch.cumprod(rates, 0)
    target_row = torch.randn(vocab, generator=torch.Generator().manual_seed(1))
    sigma = math.sqrt(0.25 / num_trials)
    for temperature in (1.0, 0.0):
        inputs = repeated_trials(target_row, None, k, max(temperature, 1.0), num_trials)
        inputs["temperature"].fill_(temperature)
        _, num_sampled = rejection_sample(**inputs, synthetic_conditional_rates=rates)
        for i in range(k):
            freq = float((num_sampled >= i + 2).float().mean())
            assert abs(freq - float(unconditional[i])) < 5 * sigma
    # Synthetic mode still never accepts a placeholder.
    inputs["draft_sampled"].view(num_trials, k + 1)[:, 1] = -1
    _, num_sampled = rejection_sample(**inputs, synthetic_conditional_rates=torch.ones(k))
    assert num_sampled.tolist() == [1] * num_trials


# ---------------------------------------------------------------------------------------------
# Determinism and batch-layout invariance
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("has_draft_logits", [False, True])
def test_deterministic_and_layout_invariant(has_draft_logits):
    """Same inputs give the same output; splitting the batch or padding rows changes nothing.

    Mixed temperatures (greedy and two non-greedy values) share the batch, slots are permuted
    and sparse, and target rows have a padded stride (spec test 11).
    """
    gen = torch.Generator().manual_seed(21)
    num_reqs, k, vocab = 10, 3, 257
    n_drafts = [3, 0, 2, 3, 1, 3, 3, 2, 0, 3]
    slots = [7, 2, 9, 0, 4, 11, 5, 1, 3, 8]
    temps = [0.6, 0.0, 1.0, 0.6, 0.0, 1.0, 0.6, 0.6, 1.0, 0.0]
    num_rows = sum(n + 1 for n in n_drafts)
    padded = torch.randn(num_rows, vocab + 3, generator=gen)
    target = padded[:, :vocab]  # row stride vocab + 3
    draft = torch.randn(12, k, vocab, generator=gen) if has_draft_logits else None
    drafts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in n_drafts]
    drafts[3][1] = -1
    common = dict(num_speculative_steps=k, max_num_reqs=12)
    seeds = [11 * r + 5 for r in range(num_reqs)]
    pos_start = [50 * r for r in range(num_reqs)]

    def run(lo, hi, row_lo, row_hi, **kw):
        inputs = make_inputs(
            target[row_lo:row_hi],
            draft,
            drafts[lo:hi],
            temps[lo:hi],
            seeds=seeds[lo:hi],
            pos_start=pos_start[lo:hi],
            slots=slots[lo:hi],
            **common,
        )
        return rejection_sample(**inputs, **kw)

    for kw in ({}, {"use_block_verification": True}, {"use_fp64": True}):
        s_all, n_all = run(0, num_reqs, 0, num_rows, **kw)
        s_again, n_again = run(0, num_reqs, 0, num_rows, **kw)
        assert torch.equal(s_all, s_again) and torch.equal(n_all, n_again)
        split = 4
        split_row = sum(n + 1 for n in n_drafts[:split])
        s_a, n_a = run(0, split, 0, split_row, **kw)
        s_b, n_b = run(split, num_reqs, split_row, num_rows, **kw)
        assert emitted(s_all, n_all) == emitted(s_a, n_a) + emitted(s_b, n_b)
        # Columns past num_sampled are filled with -1 (the kernels leave them uninitialised).
        for row, n in zip(s_all, n_all.tolist()):
            assert bool((row[n:] == -1).all())


def test_bf16_draft_logits_are_upcast_before_temperature():
    """bf16 draft logits behave exactly like the same values in fp32 (upcast, then / T)."""
    gen = torch.Generator().manual_seed(2)
    num_reqs, k, vocab = 32, 3, 64
    target, draft, tokens = _peaked_case(num_reqs, k, vocab, 0.7, seed=2)
    draft_bf16 = draft.to(torch.bfloat16)
    inputs = make_inputs(target, draft_bf16, tokens.tolist(), 0.7, num_speculative_steps=k)
    s1, n1 = rejection_sample(**inputs)
    s2, n2 = rejection_sample(**{**inputs, "draft_logits": draft_bf16.float()})
    assert torch.equal(n1, n2) and torch.equal(s1, s2)
    del gen


@pytest.mark.gpu
@pytest.mark.parametrize("has_draft_logits", [False, True])
def test_cuda_matches_cpu(has_draft_logits):
    """Same draws on both devices; decisions agree except where fp32 rounding differs."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    num_reqs, k, vocab = 64, 4, 1000
    target, draft, tokens = _peaked_case(num_reqs, k, vocab, 0.8, seed=4)
    drafts = tokens.tolist()
    for r in range(0, num_reqs, 5):
        drafts[r][r % k] = -1
    temps = [0.0 if r % 4 == 0 else 0.8 for r in range(num_reqs)]
    inputs = make_inputs(target, draft if has_draft_logits else None, drafts, temps, num_speculative_steps=k)
    cuda_inputs = {key: val.cuda() if isinstance(val, torch.Tensor) else val for key, val in inputs.items()}
    for kw in ({}, {"use_block_verification": True}, {"use_fp64": True}):
        s_cpu, n_cpu = rejection_sample(**inputs, **kw)
        s_gpu, n_gpu = rejection_sample(**cuda_inputs, **kw)
        same = [a == b for a, b in zip(emitted(s_cpu, n_cpu), emitted(s_gpu.cpu(), n_gpu.cpu()))]
        assert sum(same) >= 0.95 * num_reqs
