"""``specsample compare``: subjects timed side by side in one process, and the path grid's rows."""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from .common import UsageError, _fetch_releases, _require_gpu, _resolve_subjects, _set_vllm_repo, _subject_names

# ---- compare ---------------------------------------------------------------------------------


def cmd_compare(args: argparse.Namespace) -> int:
    from .. import worker
    from ..timing import copy_bandwidth

    _set_vllm_repo(args)
    names = _subject_names(args.subjects)
    paths = _path_grid(args)  # bad path input is a usage error before anything else
    _check_path_requests(paths, names)
    _require_gpu("specsample compare")
    _fetch_releases(names, fetch=not args.no_fetch)
    _resolve_subjects(names)
    grid = itertools.product(args.mode, args.draft, args.num_reqs, args.K, args.vocab_size, args.phi)
    units = []
    for i, ((mode, draft, r, k, v, phi), path) in enumerate(itertools.product(grid, paths)):
        point = dict(
            mode=mode,
            draft=draft,
            num_reqs=r,
            num_speculative_steps=k,
            vocab_size=v,
            placeholder_density=phi,
            placeholder_pattern=args.pattern,
            **path,
        )
        units.append(worker.Unit(f"compare/{i}", point, tuple(names)))
    bw = copy_bandwidth()
    options = worker.JobOptions(l2=args.l2, num_samples=args.samples)
    outcome = worker.run_units(units, options, log=lambda line: print(line, flush=True))
    rows = []
    for unit in units:
        base = outcome.records[unit.key].get("mrv2", {})
        for name in names:
            record = outcome.records[unit.key].get(name, {"status": "failed", "reason": "not measured"})
            row = dict(unit.point, subject=name, status=record["status"])
            if record["status"] == "ok":
                row.update(
                    median_us=record["median"] * 1e6,
                    method=record["method"],
                    l2=record["l2"],
                    bandwidth_fraction=record["bytes"] / record["median"] / bw,
                    ratio_to_mrv2=record["median"] / base["median"] if base.get("status") == "ok" else None,
                    semantics=record.get("semantics"),
                    acceptance_rate=record.get("acceptance_rate"),
                    deferral_rate=record.get("deferral_rate"),
                )
            else:
                row["reason"] = record.get("reason")
            rows.append(row)
            print(_format_row(row), flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"copy_bandwidth_gbps": bw / 1e9, "provenance": outcome.provenance, "rows": rows}, indent=1, default=str
            )
        )
    return 2 if any(r["status"] in ("failed", "crashed") for r in rows) else 0


_PATH_OPTIONS = {  # path axis -> (option dest, how a value is read)
    "logits_shape": ("logits_shape", str),
    "row_entropy": ("row_entropy", str),
    "masked_vocab_fraction": ("masked_vocab_fraction", float),
    "skip_masked_vocab_blocks": ("skip_masked_vocab_blocks", lambda v: v == "on"),
    "fly_window_size": ("fly_window_size", int),
    "watermark": ("watermark", lambda v: v == "on"),
    "draft_cache": ("draft_cache", str),
}


def _path_grid(args: argparse.Namespace) -> list[dict]:
    """The path axes' combinations asked for (each at its default unless given); a combination
    that is not a workload (vLLM forbids it, a value out of range) is a usage error."""
    from ..workloads import workload_of

    axes = {}
    for axis, (dest, read) in _PATH_OPTIONS.items():
        try:
            axes[axis] = [read(v) for v in getattr(args, dest)]
        except ValueError:
            raise UsageError(
                f"specsample compare: --{dest.replace('_', '-')}: not a number: {getattr(args, dest)}"
            ) from None
    grid = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]
    for mode, draft, path in itertools.product(args.mode, args.draft, grid):
        try:
            workload_of(
                dict(
                    mode=mode,
                    draft=draft,
                    num_reqs=args.num_reqs[0],
                    num_speculative_steps=args.K[0],
                    vocab_size=args.vocab_size[0],
                    placeholder_density=args.phi[0],
                    placeholder_pattern=args.pattern,
                    **path,
                )
            )
        except ValueError as exc:
            raise UsageError(f"specsample compare: {mode} mode, {draft} drafts: {exc}") from None
    return grid


def _check_path_requests(paths: list[dict], names: list[str]) -> None:
    """A path asked for on a subject that lacks it: one clear usage error, before measuring (a
    subject that cannot be loaded is left to :func:`_resolve_subjects`)."""
    from .. import subjects
    from ..schema import paths_of

    asked = {p for point in paths for p in paths_of(point)}
    if not asked:
        return
    for name in names:
        try:
            have = subjects.get(name).capabilities.paths
        except (subjects.SubjectError, subjects.NotSupported, ValueError):
            continue
        missing = [p for p in sorted(asked) if p not in have]
        if missing:
            raise UsageError(
                f"specsample compare: {name} has no {' or '.join(missing)} path (its paths: "
                f"{', '.join(have) or 'none'}); drop it from --subjects or leave the path off"
            )


def _format_row(row: dict) -> str:
    where = (
        f"{row['subject']:>17} {row['mode']:>8} {row['draft']:>7} R={row['num_reqs']:<4} "
        f"K={row['num_speculative_steps']} V={row['vocab_size']:<6} phi={row['placeholder_density']:<4}"
    )
    from ..schema import PATH_DEFAULTS

    paths = [f"{k}={row[k]}" for k, v in PATH_DEFAULTS.items() if k in row and row[k] != v]
    if paths:
        where += " " + " ".join(paths)
    if row["status"] != "ok":
        return f"{where}  {row['status']}: {row.get('reason')}"
    ratio = f"  x{row['ratio_to_mrv2']:.3f} of mrv2" if row.get("ratio_to_mrv2") is not None else ""
    for key, label in (("acceptance_rate", "accept"), ("deferral_rate", "defer")):
        if row.get(key) is not None:
            ratio += f"  {label} {row[key]:.2f}"
    return (
        f"{where}  {row['median_us']:9.1f} us  bw {row['bandwidth_fraction']:.2f}{ratio}  "
        f"[{row['semantics']}; {row['method']}, {row['l2']} L2]"
    )
