"""``specsample`` command line: argument parsing and I/O only; the work lives in the modules.
:data:`DESCRIPTION` is what ``specsample --help`` shows."""

from __future__ import annotations

import argparse
import os
import sys

DESCRIPTION = """\
A GPU microbenchmark and regression tracker for speculative-decoding rejection samplers: vLLM's
releases and commits, our samplers and FlashInfer (README.md).

Commands
--------
compare      time subjects side by side in one process (interleaved), no asv
bench        run one asv tier at HEAD (GPU box), results into results/
nightly      bench the nightly tier, asv publish, rebuild the dashboards (locked)
backfill     bench past commits, each from its own checkout; or fetch and bench vLLM releases
dashboard    build dashboards/ from results/ (works without a GPU)
regressions  change points in the committed results' history (works without a GPU)
signoff      compare two commits, two subjects (vLLM releases, refs), or two subjects' results
bisect       the first commit where a point's latency moved (vLLM refs or our commits)
signoff-validate  A/A sign-offs and planted slowdowns: the sign-off's detection matrix
exactness    does each subject's output follow the target's law? (GPU; docs/exactness.md)
vllm         fetch vLLM releases into the cache; list what is cached
gpuinfo      print what the machine has
tune         time fast's or express's launch configurations and kernel variants (developers, GPU)
noise-floor  a resample row's noise, its bytes and fast's resample kernel, each alone (developers, GPU)
goals        one commit's committed results against the performance goals (works without a GPU)

Exit codes: 0 success (sign-off: pass), 1 a regression, 2 bad input, a missing GPU, a failed or
crashed point, or nothing measured (sign-off: also head violating placeholder semantics where
base does not, a head biased where base is exact, or a point measured on one side only, unless
--allow-missing; exactness: 1 a subject biased or the planted control not flagged). Nothing is
written to results/ by a run that measured nothing.
"""

from . import __version__
from .commands.bench import cmd_backfill, cmd_bench, cmd_dashboard, cmd_nightly, cmd_regressions
from .commands.common import INTERPRETER_RESULTS, UsageError
from .commands.compare import cmd_compare
from .commands.devtools import cmd_goals, cmd_noise_floor, cmd_tune
from .commands.signoff import cmd_bisect, cmd_exactness, cmd_signoff, cmd_signoff_validate
from .commands.vllm import cmd_gpuinfo, cmd_vllm_fetch, cmd_vllm_list
from .schema import MODES, OUR_SUBJECTS, PATTERNS, TIERS

# ---- parser ----------------------------------------------------------------------------------


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """A command's help: each option's default appended, unless its help already says it or there
    is none to say (None, or a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


class _TopFormatter(_Formatter, argparse.RawDescriptionHelpFormatter):
    """The top-level help: the command table and exit codes keep their layout."""


def _add_path_options(p: argparse.ArgumentParser) -> None:
    """vLLM's newer sampler paths as workload axes (docs/paths.md); each defaults to off."""
    from .schema import DRAFT_CACHES, LOGITS_SHAPES, PATH_DEFAULTS, ROW_ENTROPIES

    g = p.add_argument_group("sampler paths (docs/paths.md)")

    def axis(flag: str, default: str, what: str, choices: tuple | None = None, metavar: str | None = None) -> None:
        listed = f": {', '.join(choices)}" if choices and metavar else ""
        g.add_argument(flag, nargs="+", default=[default], choices=choices, metavar=metavar, help=what + listed)

    axis("--logits-shape", PATH_DEFAULTS["logits_shape"], "target logits", LOGITS_SHAPES, "SHAPE")
    axis(
        "--row-entropy",
        PATH_DEFAULTS["row_entropy"],
        "target rows' top-3 entropy against FLy's threshold, how often FLy may defer",
        ROW_ENTROPIES,
        "LEVEL",
    )
    axis("--masked-vocab-fraction", "0.0", "vocabulary masked to -inf, in ranges", metavar="F")
    axis("--skip-masked-vocab-blocks", "off", "vLLM's masked-block skip", ("off", "on"))
    axis("--fly-window-size", "0", "FLy deferral window W (0: off)")
    axis("--watermark", "off", "watermarking", ("off", "on"))
    axis(
        "--draft-cache",
        PATH_DEFAULTS["draft_cache"],
        "draft logits through the row-mapped cache",
        DRAFT_CACHES,
        "CACHE",
    )


def _add_vllm_repo(p: argparse.ArgumentParser, refs: str = "") -> None:
    """``refs``: what else the command reads as refs of the checkout, e.g. its BASE and HEAD."""
    p.add_argument(
        "--vllm-repo",
        metavar="PATH",
        default=None,
        help="vLLM git checkout whose refs vllm@REF names (without it: $SPECSAMPLE_VLLM_REPO)"
        + (f"; {refs} are then refs of that checkout" if refs else ""),
    )


def _add_gpus(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpus",
        metavar="all|0,1,...",
        default=None,
        help="shard the points over these GPUs, one worker process each (default: one GPU)",
    )


def _add_results_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--results-dir",
        default=None,
        help=f"where results are filed; default: results/ on a GPU, {INTERPRETER_RESULTS}/ for a CPU smoke run",
    )


def _add_noise_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--noise-target",
        type=float,
        default=None,
        help="sample until the median's 99%% CI half-width is below this fraction (e.g. 0.005), at least "
        "--samples; default: exactly --samples",
    )
    p.add_argument(
        "--time-cap", type=float, default=20.0, help="seconds per point before a noise target gives up (inconclusive)"
    )
    p.add_argument(
        "--lock-clocks",
        action="store_true",
        help="lock the SM clock where the box allows it (NVML); the results say whether it did",
    )


def _add_no_fetch(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-fetch",
        action="store_true",
        help="do not fetch a vLLM release the cache lacks (a box without network); default: fetch it first",
    )


def _add_resume(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--resume",
        action="store_true",
        help="replay the sweeps a stopped run (cut off before asv saved) measured at this commit, on this "
        "box, with this code, and measure only the rest",
    )


def _add_machine(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--machine",
        default=os.environ.get("SPECSAMPLE_MACHINE"),
        help="asv machine name (default: $SPECSAMPLE_MACHINE, else named after the GPU found, e.g. h200)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specsample", description=DESCRIPTION, formatter_class=_TopFormatter)
    p.add_argument("--version", action="version", version=f"specsample {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subjects_help = f"subjects: {', '.join(OUR_SUBJECTS)}, NAME@COMMIT, vllm==X.Y.Z, vllm@REF, vllm"

    c = sub.add_parser(
        "compare",
        help="time subjects side by side (interleaved, one process)",
        formatter_class=_Formatter,
        description=subjects_help,
    )
    c.add_argument("--subjects", nargs="+", default=["mrv2", "mrv2-pre50939"], help="what to time")
    c.add_argument(
        "--mode",
        nargs="+",
        default=["standard", "block"],
        choices=MODES,
        metavar="MODE",
        help=f"verification modes: {', '.join(MODES)}",
    )
    c.add_argument("--draft", nargs="+", default=["logits"], choices=["logits", "one-hot"], help="draft kinds")
    c.add_argument("--num-reqs", nargs="+", type=int, default=[128], help="batch sizes R")
    c.add_argument(
        "--num-speculative-steps", "-K", dest="K", nargs="+", type=int, default=[4], help="speculative steps K"
    )
    c.add_argument("--vocab-size", nargs="+", type=int, default=[151936], help="vocab sizes V")
    c.add_argument(
        "--placeholder-density",
        "--phi",
        dest="phi",
        nargs="+",
        type=float,
        default=[0.0, 0.5, 1.0],
        help="placeholder densities phi",
    )
    c.add_argument(
        "--pattern", default="trailing", choices=[p for p in PATTERNS if p != "all"], help="where placeholders sit"
    )
    c.add_argument("--l2", default="cold", choices=["cold", "warm"], help="L2 state of every call")
    _add_path_options(c)
    c.add_argument("--samples", type=int, default=20, help="samples per subject and point")
    c.add_argument("--json", help="also write the rows to this JSON file")
    _add_no_fetch(c)
    _add_vllm_repo(c)
    c.set_defaults(func=cmd_compare)

    b = sub.add_parser("bench", help="run one asv tier at HEAD into results/", formatter_class=_Formatter)
    b.add_argument("--tier", default="nightly", choices=TIERS, help="which tier (smoke runs on a CPU)")
    _add_machine(b)
    b.add_argument("--bench", help="asv --bench regex (default: the whole tier)")
    b.add_argument("--rev", help="measure this commit from a worktree instead of the checkout")
    _add_no_fetch(b)
    _add_resume(b)
    _add_results_dir(b)
    _add_vllm_repo(b)
    _add_gpus(b)
    b.set_defaults(func=cmd_bench)

    f = sub.add_parser(
        "backfill",
        help="benchmark past commits (each from its own worktree) or vLLM releases",
        formatter_class=_Formatter,
    )
    f.add_argument("revs", nargs="+", help="commits or ranges of this repository, or vllm==X.Y.Z releases")
    f.add_argument("--tier", default="quick", choices=TIERS, help="tier measured at each commit")
    _add_results_dir(f)
    _add_machine(f)
    _add_vllm_repo(f)
    _add_gpus(f)
    f.set_defaults(func=cmd_backfill)

    n = sub.add_parser(
        "nightly", help="bench the nightly tier, asv publish, rebuild dashboards/", formatter_class=_Formatter
    )
    _add_machine(n)
    _add_no_fetch(n)
    _add_resume(n)
    n.add_argument(
        "--no-exactness",
        action="store_true",
        help="do not check each subject's output law after the tier (results/<machine>/<sha8>.exactness)",
    )
    n.add_argument(
        "--no-bisect",
        action="store_true",
        help="do not bisect a new change point of vllm@main (with a checkout: results/<machine>/culprits/)",
    )
    _add_vllm_repo(n)
    _add_gpus(n)
    n.set_defaults(func=cmd_nightly)

    d = sub.add_parser("dashboard", help="build dashboards/ from results/ (no GPU needed)", formatter_class=_Formatter)
    d.add_argument("--results-dir", default="results", help="asv results directory")
    d.add_argument("--out", default="dashboards", help="where the site is written")
    d.add_argument(
        "--machine",
        default=None,
        help="only this machine's site, in --out; default: every GPU machine's, the one with the most commits "
        "measured in --out and each other in --out/MACHINE/ (never a CPU-interpreter one)",
    )
    d.set_defaults(func=cmd_dashboard)

    r = sub.add_parser(
        "regressions",
        help="change points in the results' history: exit 1 if a regression, 0 if none, 2 bad input",
        formatter_class=_Formatter,
        description="Steps in every series (machine, benchmark, point) over commits, and over vLLM releases, "
        "found with asv's step detection, each above the measured noise "
        "(specsample.track.changepoints): ranked regressions and improvements still present at the "
        "newest commit or release, and the newest commit against the previous one. Latency series "
        "only (a ratio to mrv2 or a bandwidth fraction moves with what it is divided by); a stage "
        "that steps while its call does not is listed as a stage shift and does not count.",
    )
    r.add_argument("--results-dir", default="results", help="asv results directory")
    r.add_argument("--machine", help="only this machine's results; default: every machine in --results-dir")
    r.add_argument("--json", metavar="FILE", help="also write every change and the newest-vs-previous summary here")
    r.set_defaults(func=cmd_regressions)

    s = sub.add_parser(
        "signoff",
        help="did anything get slower? exit 0 pass, 1 regression, 2 not verified",
        formatter_class=_Formatter,
        description=subjects_help,
    )
    s.add_argument("base", nargs="?", help="base: a commit, a subject (vllm==0.32.0), or with --vllm-repo a ref")
    s.add_argument("head", nargs="?", help="head: the same kind as base (head == base: an A/A run)")
    s.add_argument(
        "--results",
        nargs=2,
        metavar=("BASE", "HEAD"),
        help="compare two subjects' committed results instead of measuring (newest commit with both)",
    )
    s.add_argument("--commit", help="with --results: this commit's results instead of the newest with both")
    s.add_argument("--results-dir", default="results", help="asv results directory (--results)")
    s.add_argument(
        "--tier",
        default=None,
        choices=TIERS,
        help="the points measured (default quick; smoke runs on a CPU); with --results, only this tier's results",
    )
    s.add_argument("--sweep", action="append", metavar="NAME", help="only this sweep of the tier, e.g. Density")
    s.add_argument(
        "--subjects",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="two commits: only these subjects of the tier, e.g. mrv2",
    )
    s.add_argument("--samples", type=int, default=30, help="samples per side and point")
    s.add_argument("--alpha", type=float, default=0.002, help="significance level of the Mann-Whitney U test")
    s.add_argument(
        "--min-effect",
        type=float,
        default=None,
        help="smallest relative change that counts (default 0.02 paired, 0.05 for --results)",
    )
    s.add_argument(
        "--min-abs-us",
        type=float,
        default=None,
        help="time points must also change by more than this many us (default 0.5 paired, 0 for --results)",
    )
    s.add_argument(
        "--allow-missing",
        action="store_true",
        help="pass points measured on one side only (listed in the report) instead of exit 2",
    )
    s.add_argument(
        "--fail-on-inconclusive",
        action="store_true",
        help="exit 2 when a point is inconclusive (neither slower, faster, nor shown the same)",
    )
    _add_noise_options(s)
    _add_machine(s)
    s.add_argument("--report", help="also write the markdown report here")
    s.add_argument("--no-exactness", action="store_true", help="skip the exactness rows (docs/exactness.md)")
    _add_no_fetch(s)
    _add_vllm_repo(s, refs="BASE and HEAD")
    s.set_defaults(func=cmd_signoff)

    bi = sub.add_parser(
        "bisect",
        help="the first commit where a point's latency moved: exit 0 found, 1 not reproducible, 2 error",
        formatter_class=_Formatter,
        description="Bisect GOOD..BAD (refs of --vllm-repo, or our commits) at one point: each step "
        "times the middle commit against GOOD and BAD in one worker process and judges it with "
        "sign-off's four-way verdict; an inconclusive step is measured again with more samples; a "
        "commit that does not load or crashes is skipped. Writes bisect.json and bisect.md to --out.",
    )
    bi.add_argument("good", nargs="?", help="a commit where the point was fine")
    bi.add_argument("bad", nargs="?", help="a later commit where it moved (GOOD must be its ancestor)")
    bi.add_argument(
        "--change",
        metavar="ID",
        help="a change point id from `specsample regressions` (its point; "
        "and GOOD and BAD for a change over our commits)",
    )
    bi.add_argument("--results-dir", default="results", help="asv results directory (--change)")
    bi.add_argument(
        "--subjects", metavar="NAME", default=None, help="our subject bisected over our commits (default mrv2)"
    )
    bi.add_argument("--mode", choices=MODES, default=None, help="verification mode (default standard)")
    bi.add_argument("--draft", choices=["logits", "one-hot"], default=None, help="draft kind (default logits)")
    bi.add_argument("--num-reqs", type=int, default=None, help="R (default 128)")
    bi.add_argument("--num-speculative-steps", "-K", type=int, default=None, help="K (default 4)")
    bi.add_argument("--vocab-size", type=int, default=None, help="V (default 151936)")
    bi.add_argument("--placeholder-density", "--phi", type=float, default=None, help="phi (default 0.5)")
    bi.add_argument(
        "--placeholder-pattern",
        choices=[p for p in PATTERNS if p != "all"],
        default=None,
        help="where placeholders sit (default trailing)",
    )
    bi.add_argument("--samples", type=int, default=30, help="samples per side at the first try of each step")
    bi.add_argument(
        "--min-effect",
        type=float,
        default=None,
        help="smallest relative change that counts, and the margin of 'same' (default 0.02)",
    )
    bi.add_argument("--min-abs-us", type=float, default=None, help="time changes must also exceed this (default 0.5)")
    _add_noise_options(bi)
    bi.add_argument(
        "--max-effort", type=int, default=2, help="retries of an inconclusive step, each with twice the samples"
    )
    bi.add_argument("--out", default="bisect", help="directory for bisect.json and bisect.md")
    bi.add_argument("--host", action="store_true", help=argparse.SUPPRESS)  # CPU interpreter: checks the flow only
    _add_machine(bi)
    _add_vllm_repo(bi, refs="GOOD and BAD")
    bi.set_defaults(func=cmd_bisect)

    ex = sub.add_parser(
        "exactness",
        help="does each subject's output follow the target's law? exit 0 exact, 1 biased, 2 bad input",
        formatter_class=_Formatter,
        description=subjects_help + ", planted (a biased control)",
    )
    ex.add_argument("--subjects", nargs="+", required=True, metavar="NAME", help="subjects to check")
    ex.add_argument(
        "--drafting",
        nargs="+",
        default=["independent"],
        choices=("independent", "production", "production-unsalted"),
        metavar="HOW",
        help="how drafts are drawn: independent, or production (production-unsalted) by the subject's own "
        "gumbel_sample with (without) its drafting flag",
    )
    ex.add_argument("--modes", nargs="+", default=["standard", "block"], choices=("standard", "block"))
    ex.add_argument("--num-trials", type=int, default=200_000, help="trials (requests) per check")
    ex.add_argument("--vocab-size", type=int, default=16)
    ex.add_argument("--num-speculative-steps", type=int, default=3)
    ex.add_argument("--seed", type=int, default=0, help="seed of the law and of the trials")
    ex.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: Triton's interpreter (tiny sizes)")
    ex.add_argument("--results-dir", default="results", help="writes <results-dir>/<machine>/<sha8>.exactness")
    ex.add_argument(
        "--commit", default=None, help="the commit the file is named after (default HEAD; a full hash needs no git)"
    )
    _add_machine(ex)
    _add_no_fetch(ex)
    _add_vllm_repo(ex)
    ex.set_defaults(func=cmd_exactness)

    sv = sub.add_parser(
        "signoff-validate",
        help="validate the sign-off: A/A runs and planted slowdowns",
        formatter_class=_Formatter,
        description="Calibrate the planted slowdown, plant it as throw-away commits, sign each "
        "off against head, run A/A sign-offs, and write the detection matrix "
        "(specsample.runs.validate). Exit 0 when it says PASS, else 1.",
    )
    sv.add_argument("--out", default=os.environ.get("OUT") or "validation", help="output ($OUT, else ./validation)")
    sv.add_argument("--repo", help="the specsample checkout whose HEAD is validated (default: the one around the cwd)")
    sv.add_argument("--tier", default=None, choices=TIERS, help="default quick (smoke with --smoke)")
    sv.add_argument("--sweep", action="append", metavar="NAME", help="only this sweep of the tier (repeatable)")
    sv.add_argument(
        "--subjects",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="only these subjects of the tier",
    )
    sv.add_argument("--samples", type=int, default=None, help="samples per side and point (default 30; 2 with --smoke)")
    sv.add_argument("--aa-runs", type=int, default=5, help="A/A sign-offs")
    sv.add_argument("--targets", type=float, nargs="+", default=None, help="planted slowdowns (default 0.03 0.05 0.1)")
    sv.add_argument("--budget", type=float, default=450.0, help="seconds in all; runs that would not fit are left out")
    _add_machine(sv)
    sv.add_argument("--alpha", type=float, default=0.002, help="significance level of the Mann-Whitney U test")
    sv.add_argument("--min-effect", type=float, default=None, help="paired min_effect (default 0.02)")
    sv.add_argument("--min-abs-us", type=float, default=None, help="paired absolute floor in us (default 0.5)")
    sv.add_argument("--smoke", action="store_true", help="CPU: interpreter, tiny shapes, host timer (checks the flow)")
    sv.set_defaults(func=cmd_signoff_validate)

    v = sub.add_parser("vllm", help="vLLM releases in the cache ($SPECSAMPLE_CACHE)", formatter_class=_Formatter)
    vsub = v.add_subparsers(dest="vllm_command", required=True, metavar="ACTION")
    vf = vsub.add_parser(
        "fetch", help="pip download releases and extract the sampler's closure", formatter_class=_Formatter
    )
    vf.add_argument("releases", nargs="*", metavar="X.Y.Z", help="releases to fetch")
    vf.add_argument("--from-wheel", metavar="PATH", help="extract from this wheel instead of downloading")
    vf.set_defaults(func=cmd_vllm_fetch)
    vl = vsub.add_parser(
        "list",
        help="what the cache holds; --index: and the package index's releases (exit 1 if one is newer than the tiers')",
        formatter_class=_Formatter,
    )
    vl.add_argument(
        "--index",
        action="store_true",
        help="also list the package index's releases from 0.22.0 on; exit 1 if one is newer than "
        "specsample.tiers.MRV2_RELEASES' newest, 2 if the index cannot be read",
    )
    vl.set_defaults(func=cmd_vllm_list)

    g = sub.add_parser(
        "gpuinfo", help="print GPU, driver, CUDA, torch, Triton, clocks, copy bandwidth", formatter_class=_Formatter
    )
    g.set_defaults(func=cmd_gpuinfo)

    t = sub.add_parser(
        "tune",
        help="time fast's (or express's) candidate configurations beside mrv2: whole calls and kernels (GPU)",
        formatter_class=_Formatter,
        description="Time a sampler's configurations (fast: large, small, tiny; express: large, small; and any "
        "--candidate) and mrv2 on each workload, whole calls and kernels alone, interleaved, cold L2 "
        "(specsample.devtools.tune).",
    )
    t.add_argument(
        "--sampler",
        default="fast",
        choices=["fast", "express"],
        help="whose Pipeline the candidates configure (fast.Config or express.Config)",
    )
    t.add_argument(
        "--out", default=None, help="JSON of every median, rewritten after each workload; default: tune-SAMPLER.json"
    )
    t.add_argument(
        "--workload",
        action="append",
        metavar="NAME",
        help="only this workload (repeatable); default: every one of specsample.devtools.tune.WORKLOADS",
    )
    t.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="NAME=BASE:FIELD=VALUE,...",
        help="an extra candidate: BASE (fast: large, small or tiny; express: large or small) with those "
        "Config fields replaced, e.g. w8=large:stats_warps=8, or with --sampler express "
        "b8=small:stats_blocks=8 (repeatable)",
    )
    t.add_argument(
        "--stages",
        default="large,small,before",
        metavar="NAME,...",
        help="candidates whose kernels are also timed alone (a --before module's NAME too)",
    )
    t.add_argument(
        "--before",
        action="append",
        metavar="[NAME=]MODULE",
        help="another fast.py (or express package with --sampler express), importable as this module, timed in "
        "its own defaults as NAME ('before' when not given), e.g. specsample.kernels._fast_before from "
        "`git show REF:specsample/kernels/fast.py`; repeatable, to time several variants in one measurement",
    )
    t.set_defaults(func=cmd_tune)

    nf = sub.add_parser(
        "noise-floor",
        help="a resample row's Gumbel noise alone, its bytes alone, and fast's resample kernel (GPU)",
        formatter_class=_Formatter,
        description="Time the floor of a resample with mrv2's random numbers beside fast's resample kernel, "
        "on one R x V grid in fast's resample geometry (specsample.devtools.noise_floor).",
    )
    nf.add_argument("--out", default="noise-floor.json", help="where the JSON result is written")
    nf.add_argument("--num-reqs", type=int, default=128, help="requests R")
    nf.add_argument("--vocab-size", type=int, default=151936, help="vocab size V")
    nf.add_argument("--num-speculative-steps", type=int, default=4, help="speculative steps K of the resample batch")
    nf.set_defaults(func=cmd_noise_floor)

    gl = sub.add_parser(
        "goals",
        help="one commit's committed results against the performance goals (no GPU needed)",
        formatter_class=_Formatter,
        description="Report how one commit's results stand against goals read from a JSON file "
        "(default: specsample/devtools/goals.json; its form: specsample.devtools.goals).",
    )
    gl.add_argument("commit", help="a commit hash or its prefix, as in results/<machine>/")
    gl.add_argument("--machine", default=None, help="asv machine name (default: the one with results for the commit)")
    gl.add_argument("--tier", default="nightly", choices=TIERS, help="whose results (quick: its points only)")
    gl.add_argument("--results-dir", default="results", help="asv results directory")
    gl.add_argument("--goals", metavar="FILE", default=None, help="goals file (default: the packaged goals.json)")
    gl.add_argument(
        "--readme",
        metavar="FILE",
        default=None,
        help="also rewrite FILE's figures block (between its figures markers) with a table of the goals",
    )
    gl.set_defaults(func=cmd_goals)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
