"""Can a persistent kernel stream logits rows as fast as a one-tile-a-program grid? (GPU only)

Issue 18's goal 2 needs kernels whose cost follows the rows that have work. Every such kernel
measured so far loops over tiles in a fixed number of programs (session 13's and 15's tile
loops, session 14's persistent grids) and streamed 10-60% slower than the grid where every row
has work. This probe isolates the streaming: each kernel computes, per sampling block of 2048
entries, the block max and sum of exp of fp32 rows (express's one-hot stats work, no draw), over
either every row (``phi=0``: R*K rows) or one row in K (``phi=1``: row 0 of each request):

* ``grid`` (``group-1``): express's large stats geometry, (R*K, nb/2) programs of 4096 entries, 4 warps; a
  program whose row has no work exits after loading its row's flag.
* ``loop-P``: P programs an SM, each loops over the tiles of the rows with work (a compacted
  list, built on the host: the probe times streaming, not the list), loads from pointers.
* ``grid-meta``: the grid with express's exit test (``express._stats_rows``: the request's rows,
  then the slot's temperature: two dependent loads deep) on express's row layout (K + 1 rows a request, greedy:
  rows j <= first placeholder).
* ``group-G``: express's ``Config.stats_loop`` shape: the grid with G consecutive tiles of a row
  a program, one after another (fewer programs, the same order of tiles within a program).
* ``loop-P-2k``: ``loop-P`` with tiles of 2048 entries (session 14's persistent stats tiles).
* ``tma-P-S``: the same loop with the tile loaded by the tensor memory accelerator (a host
  tensor descriptor over the rows viewed as [N, V/128, 128], boxes of [1, 32, 128]) and the loop
  software-pipelined ``S`` stages deep, so that up to S tiles a program are in flight in shared
  memory whatever the registers.

Usage on the GPU box: ``python scripts/stream_probe.py [--reqs 128] [--vocab 151936]``. Prints one
line per kernel and density: median us per call (CUDA graph, cold L2: see specsample.timing),
GB/s of rows with work, and the largest difference of its outputs from the grid's.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from specsample.kernels.express import _chunked_sum, _stats_rows
from specsample.timing import TimingConfig, copies_for_cold_l2, measure

BLOCK = 2048  # entries a sampling block (express.SAMPLE_BLOCK)
SUB = 2  # sampling blocks a tile (express's large stats: 4096 entries)
LINE = 128  # the descriptor's inner dimension: V must be a multiple of it


@triton.jit
def _tile_stats(x, out_max_ptr, out_sum_ptr, row, blocks, num_blocks, BODY: tl.constexpr):
    # x: [SUB, BLOCK] fp32, -inf past V. One block max and one sum of exp per sampling block.
    m = tl.max(x, 1)
    e = tl.where(x == float("-inf"), 0.0, tl.exp(x - m[:, None]))
    if BODY == "chunked":  # express's stats sums: fp32 over chunks of 32 entries, fp64 over chunks
        s = _chunked_sum(e, x.shape[0], x.shape[1]).to(tl.float32)
    else:
        s = tl.sum(e, 1)
    bmask = blocks < num_blocks
    tl.store(out_max_ptr + row * num_blocks + blocks, m, mask=bmask)
    tl.store(out_sum_ptr + row * num_blocks + blocks, s, mask=bmask)


@triton.jit
def _load_tile(x_ptr, stride, row, tile, V, SUB_: tl.constexpr, BLOCK_: tl.constexpr):
    # Tile ``tile`` of a row: sampling blocks tile*SUB_ .. + SUB_-1 as [SUB_, BLOCK_], -inf past V.
    blocks = tile * SUB_ + tl.arange(0, SUB_)
    offs = blocks[:, None] * BLOCK_ + tl.arange(0, BLOCK_)[None, :]
    return blocks, tl.load(x_ptr + row * stride + offs, mask=offs < V, other=float("-inf"))


@triton.jit
def _grid_meta_kernel(
    x_ptr,
    stride,
    cu_num_logits_ptr,
    draft_sampled_ptr,
    idx_mapping_ptr,
    temperature_ptr,
    out_max_ptr,
    out_sum_ptr,
    num_blocks,
    V,
    K: tl.constexpr,
    K_P2: tl.constexpr,
    SUB_: tl.constexpr,
    BLOCK_: tl.constexpr,
    BODY: tl.constexpr,
):
    # The grid with express's exit test (express._stats_rows: the request's rows and first
    # placeholder, then the slot's temperature; two dependent loads deep).
    req = (tl.program_id(0) // K).to(tl.int64)
    j = tl.program_id(0) % K
    start, _, _, num_read, _ = _stats_rows(
        cu_num_logits_ptr, draft_sampled_ptr, idx_mapping_ptr, temperature_ptr, req, K_P2
    )
    if j >= num_read:
        return
    row = start + j
    blocks, x = _load_tile(x_ptr, stride, row, tl.program_id(1), V, SUB_, BLOCK_)
    _tile_stats(x, out_max_ptr, out_sum_ptr, row, blocks, num_blocks, BODY)


@triton.jit
def _group_kernel(
    x_ptr,
    stride,
    has_work_ptr,
    out_max_ptr,
    out_sum_ptr,
    num_blocks,
    V,
    SUB_: tl.constexpr,
    BLOCK_: tl.constexpr,
    GROUP: tl.constexpr,
    BODY: tl.constexpr,
):
    # GROUP consecutive tiles of one row, one after another (express's Config.stats_loop shape);
    # GROUP = 1 is express's stats grid, one tile a program. A row without work: one load, exit.
    row = tl.program_id(0).to(tl.int64)
    if tl.load(has_work_ptr + row) == 0:
        return
    for i in tl.static_range(GROUP):
        blocks, x = _load_tile(x_ptr, stride, row, tl.program_id(1) * GROUP + i, V, SUB_, BLOCK_)
        _tile_stats(x, out_max_ptr, out_sum_ptr, row, blocks, num_blocks, BODY)


@triton.jit
def _loop_kernel(
    x_ptr,
    stride,
    work_ptr,
    num_work,
    out_max_ptr,
    out_sum_ptr,
    num_blocks,
    tiles_per_row,
    V,
    SUB_: tl.constexpr,
    BLOCK_: tl.constexpr,
    STAGES: tl.constexpr,
    BODY: tl.constexpr,
):
    for t in tl.range(tl.program_id(0), num_work * tiles_per_row, tl.num_programs(0), num_stages=STAGES):
        row = tl.load(work_ptr + t // tiles_per_row).to(tl.int64)
        blocks, x = _load_tile(x_ptr, stride, row, t % tiles_per_row, V, SUB_, BLOCK_)
        _tile_stats(x, out_max_ptr, out_sum_ptr, row, blocks, num_blocks, BODY)


@triton.jit
def _tma_kernel(
    x_desc,
    work_ptr,
    num_work,
    out_max_ptr,
    out_sum_ptr,
    num_blocks,
    tiles_per_row,
    V,
    SUB_: tl.constexpr,
    BLOCK_: tl.constexpr,
    LINE_: tl.constexpr,
    STAGES: tl.constexpr,
    BODY: tl.constexpr,
):
    LINES: tl.constexpr = SUB_ * BLOCK_ // LINE_
    for t in tl.range(tl.program_id(0), num_work * tiles_per_row, tl.num_programs(0), num_stages=STAGES):
        row = tl.load(work_ptr + t // tiles_per_row)
        g = t % tiles_per_row
        x = x_desc.load([row, g * LINES, 0])  # [1, LINES, LINE]; lines past V are zero-filled
        x = tl.reshape(x, [SUB_, BLOCK_])
        offs = g * (SUB_ * BLOCK_) + tl.arange(0, SUB_)[:, None] * BLOCK_ + tl.arange(0, BLOCK_)[None, :]
        x = tl.where(offs < V, x, float("-inf"))
        _tile_stats(x, out_max_ptr, out_sum_ptr, row.to(tl.int64), g * SUB_ + tl.arange(0, SUB_), num_blocks, BODY)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reqs", type=int, default=128)
    ap.add_argument("--k", type=int, default=4, help="rows a request (stats reads rows 0..K-1)")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--body", choices=["plain", "chunked"], default="plain", help="the sum of exp per block")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("stream_probe: needs a CUDA GPU")
    if args.vocab % LINE:
        raise SystemExit(f"stream_probe: --vocab must be a multiple of {LINE}")
    R, K, V = args.reqs, args.k, args.vocab
    N, nb = R * K, triton.cdiv(V, BLOCK)
    tiles_per_row = triton.cdiv(nb, SUB)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    copies = copies_for_cold_l2(N * V * 4, "cold")
    xs = [torch.randn(N, V, device="cuda") for _ in range(copies)]
    out_max = torch.empty(N, nb, device="cuda")
    out_sum = torch.empty(N, nb, device="cuda")
    block = [1, SUB * BLOCK // LINE, LINE]
    descs = [TensorDescriptor.from_tensor(x.view(N, V // LINE, LINE), block) for x in xs]
    cfg = TimingConfig()
    print(
        f"body {args.body}, R={R} K={K} V={V}: {N} rows, {tiles_per_row} tiles a row, {sms} SMs, {copies} input copies",
        flush=True,
    )

    for phi in (0.0, 1.0):
        has_work = torch.ones(N, dtype=torch.int32, device="cuda")
        if phi == 1.0:
            has_work.view(R, K)[:, 1:] = 0
        work = torch.nonzero(has_work).flatten().to(torch.int32)
        num_work = work.numel()
        gb = num_work * V * 4 / 1e9

        # grid-meta reads express's layout: request r's K + 1 target rows from r * (K + 1) of its own
        # [R * (K + 1), V] copies (the last, the bonus row, never read by stats); greedy
        # (temperature 0) reads rows j <= first placeholder: rows 0..K-1 at phi=0, row 0 at phi=1.
        cu = (torch.arange(R + 1, device="cuda") * (K + 1)).to(torch.int32)
        drafts = torch.full((R * (K + 1) + 1,), -1 if phi == 1.0 else 0, dtype=torch.int32, device="cuda")
        idx = torch.arange(R, dtype=torch.int32, device="cuda")
        temperature = torch.zeros(R, device="cuda")
        meta_rows = torch.arange(R, device="cuda")[:, None] * (K + 1) + torch.arange(K, device="cuda")[None, :]
        meta_rows = meta_rows[:, :1].flatten() if phi == 1.0 else meta_rows.flatten()
        meta_max = torch.empty(R * (K + 1), nb, device="cuda")
        meta_sum = torch.empty(R * (K + 1), nb, device="cuda")

        def grid_meta(x, _d):
            return _grid_meta_kernel[(R * K, tiles_per_row)](
                x,
                x.stride(0),
                cu,
                drafts,
                idx,
                temperature,
                meta_max,
                meta_sum,
                nb,
                V,
                K,
                triton.next_power_of_2(K),
                SUB,
                BLOCK,
                num_warps=4,
                BODY=args.body,
            )

        def group(g):
            def call(x, _d):
                return _group_kernel[(N, triton.cdiv(tiles_per_row, g))](
                    x, x.stride(0), has_work, out_max, out_sum, nb, V, SUB, BLOCK, g, num_warps=4, BODY=args.body
                )

            return call

        def loop(p, stages, sub=SUB, warps=4):
            def call(x, _d):
                return _loop_kernel[(sms * p,)](
                    x,
                    x.stride(0),
                    work,
                    num_work,
                    out_max,
                    out_sum,
                    nb,
                    triton.cdiv(nb, sub),
                    V,
                    sub,
                    BLOCK,
                    stages,
                    num_warps=warps,
                    BODY=args.body,
                )

            return call

        def tma(p, stages, warps=4):
            def call(_x, d):
                return _tma_kernel[(sms * p,)](
                    d,
                    work,
                    num_work,
                    out_max,
                    out_sum,
                    nb,
                    tiles_per_row,
                    V,
                    SUB,
                    BLOCK,
                    LINE,
                    stages,
                    num_warps=warps,
                    BODY=args.body,
                )

            return call

        kernels = {"grid": group(1), "group-2": group(2), "group-4": group(4)}
        for p in (4, 7, 8):
            kernels[f"loop-{p}-s1"] = loop(p, 1)
        kernels["loop-4-s3"] = loop(4, 3)
        for p in (8, 16):  # tiles of one sampling block (2048 entries): half the bytes a program
            kernels[f"loop-{p}-2k"] = loop(p, 1, sub=1)
        for p, s in ((2, 2), (4, 2), (4, 3)):
            kernels[f"tma-{p}-s{s}"] = tma(p, s)
        xs_meta = [
            torch.randn(R * (K + 1), V, device="cuda") for _ in range(copies_for_cold_l2(R * (K + 1) * V * 4, "cold"))
        ]
        meta_max.fill_(float("nan"))
        compiled = grid_meta(xs_meta[0], None)
        torch.cuda.synchronize()
        written = torch.nonzero(~torch.isnan(meta_max[:, 0])).flatten()
        padded = torch.nn.functional.pad(xs_meta[0][meta_rows], (0, nb * BLOCK - V), value=float("-inf"))
        ok = torch.equal(written, meta_rows) and torch.equal(meta_max[meta_rows], padded.view(-1, nb, BLOCK).amax(2))
        t = measure([lambda x=x: grid_meta(x, None) for x in xs_meta], cfg)
        us = t.median * 1e6
        print(
            f"phi={phi:.0f} {'grid-meta':12s} {us:8.1f} us  {gb / (us * 1e-6):7.0f} GB/s  {compiled.n_regs:3d} registers  "
            f"rows and block maxima {'as expected' if ok else 'WRONG'}",
            flush=True,
        )
        del xs_meta
        ref = None
        for name, fn in kernels.items():
            try:
                out_max.fill_(float("nan"))
                out_sum.fill_(float("nan"))
                compiled = fn(xs[0], descs[0])
                torch.cuda.synchronize()
                got = torch.cat([out_max[has_work.bool()], out_sum[has_work.bool()]])
                if ref is None:
                    ref = got.clone()
                err = (got - ref).abs().max().item()
                t = measure([lambda x=x, d=d: fn(x, d) for x, d in zip(xs, descs)], cfg)
                us = t.median * 1e6
                print(
                    f"phi={phi:.0f} {name:12s} {us:8.1f} us  {gb / (us * 1e-6):7.0f} GB/s  {compiled.n_regs:3d} registers  max diff {err:.2e}",
                    flush=True,
                )
            except Exception as e:  # a configuration the compiler refuses: say so, go on
                print(f"phi={phi:.0f} {name:12s} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)


if __name__ == "__main__":
    main()
