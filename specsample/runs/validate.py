"""Validate the sign-off: it must catch planted slowdowns and stay quiet on A/A runs.

``specsample signoff-validate`` (:func:`validate`), in four steps (progress on the log); what is
planted, the order of the runs and the options are in :mod:`.plants`:

a. **Calibrate** (:mod:`.calibration`) the planted delay on the validated head's code at the
   base point (R=128, K=4, V=151936, block verification, draft logits, phi=0, ``mrv2``): the
   wrapper subject ``mrv2@HEAD+extra=n`` (:mod:`specsample.subjects.planted`: ``mrv2@HEAD``
   followed by a delay kernel of ``n`` dependent iterations per row) in this process,
   ``mrv2@HEAD`` against doubling candidates, interleaved, until the slowdown passes 1.5x the
   largest target; fit it (least squares, for the record), pick the iteration counts for about
   3%, 5% and 10% by interpolating the measured curve, then measure those counts against 0
   again and report what they give (re-picking up to twice when a count misses its target by
   more than 30%).
b. **Plant** each count as a head side: ``S@HEAD+extra=<n>`` for the subjects of
   :data:`.plants.PLANTED_SUBJECTS` (the delay kernel runs in block verification with draft
   logits only), ``S@HEAD`` for every other subject. Nothing is committed and no product code
   carries a knob. If HEAD's ``specsample/`` differs from the working tree, a snapshot commit
   of the working tree's ``specsample/`` on top of HEAD stands in for HEAD, so the code
   validated is the code present.
c. **Sign off** with :func:`.paired.signoff_commits` (what ``specsample signoff`` runs):
   ``aa_runs`` A/A runs (head vs head) and one run per plant (head vs planted head), on the
   tier (a subset with sweeps / subjects). Runs are ordered A/A 1, 5%, 10%, A/A 2, 3%, A/A 3, ...
   so that a budget cut keeps both kinds; a run that would not finish inside the budget is left
   out and says so.
d. **Separate-process comparisons**, at no extra measurement: every paired run's base side is
   head's code measured in its own worker process, so two runs' base sides are the same code
   measured in separate processes, as two asv runs measure it, and a planted run's head side
   against the previous run's base side is a planted slowdown seen that way. They are judged as
   committed results are (``specsample signoff --results`` and comparisons across commits):
   asv's threshold (:data:`.stats.ASV_MIN_EFFECT`, 5%), no absolute floor. That measures the
   false alarms of the separate-process comparison and whether it catches each plant. (Within
   one asv run the subjects of a point are interleaved in one worker; these rows are the
   conservative case of two separate runs.)

Outputs (:mod:`.detection` judges the runs and writes them), in ``out``, rewritten after every
run so an interrupted validation keeps what it measured; few files, so the folder fits a
size-limited results transfer: ``detection-matrix.md`` (calibration, one row per paired run:
regressions flagged among touched points, i.e. block verification with draft logits of
:data:`.plants.PLANTED_SUBJECTS`, and among the untouched rest, improvements, unverified
points, verdict; then the separate-process rows), ``reports.md`` (every sign-off's markdown
report), ``frames.parquet`` (or ``frames.csv`` without pyarrow: the tidy frames, plus a ``run``
column), ``verdicts.csv`` (``run`` and ``comparison``, paired or separate), ``calibration.json``.

Criterion (the exit code): every A/A run flags no regression and verifies every point; the 5%
and 10% plants are flagged at every touched point and nowhere else; the 3% plant is reported,
with no requirement. The separate-process rows are reported (false alarms, plants caught), with
no requirement.

``--smoke`` runs on a CPU (Triton interpreter, tiny shapes, host wall-clock timer) and checks
the flow and the outputs, not detection.
"""

from __future__ import annotations

import gc
import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from . import paired
from .calibration import calibrate
from .detection import Run, Separate, display_order, judge, overall, separate_comparisons, write_outputs
from .plants import PLANTED_SUBJECTS, Options, ValidationError, log_to_stdout, planted_name, run_order

GIT_USER = (
    "-c",
    "user.name=specsample validation",
    "-c",
    "user.email=validation@specsample.invalid",
    "-c",
    "commit.gpgsign=false",
)


# ---------------------------------------------------------------------------------------------
# b. The validated head
# ---------------------------------------------------------------------------------------------


def validated_head(repo: Path) -> tuple[str, str]:
    """HEAD, or a snapshot commit of the working tree's ``specsample/`` on top of it when they
    differ; ``(sha, how)``."""
    from .asv import git, worktree

    head = git(repo, "rev-parse", "HEAD")
    if not git(repo, "status", "--porcelain", "--", "specsample"):
        return head, "HEAD"
    with worktree(repo, head) as wt:
        shutil.rmtree(wt / "specsample")
        for name in git(repo, "ls-files", "-co", "--exclude-standard", "--", "specsample").splitlines():
            if (repo / name).is_file():
                (wt / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(repo / name, wt / name)
        git(wt, "add", "-A", "--", "specsample")
        git(
            wt,
            *GIT_USER,
            "commit",
            "-q",
            "--no-verify",
            "--allow-empty",
            "-m",
            "validation: snapshot of the working tree's specsample/ (not on any branch)",
        )
        sha = git(wt, "rev-parse", "HEAD")
    return sha, f"snapshot of the working tree's specsample/ on HEAD {head[:8]}"


# ---------------------------------------------------------------------------------------------
# The whole validation
# ---------------------------------------------------------------------------------------------


def validate(opts: Options, log: Callable[[str], None] = log_to_stdout) -> int:
    """Steps a-d (module docstring); 0 when the matrix says PASS, else 1."""
    import os
    import sys

    start = time.monotonic()
    if opts.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        # The calibration runs a commit's kernels here, under the interpreter: Triton must not
        # have been imported yet (its language functions are decorated at import).
        if "triton" in sys.modules:
            raise ValidationError("a CPU run needs TRITON_INTERPRET=1 set before Triton is imported")
        os.environ["TRITON_INTERPRET"] = "1"
    repo = opts.repo
    if not (repo / ".git").exists():
        raise ValidationError(f"{repo} is not a git repository")
    head, head_how = validated_head(repo)
    log(f"specsample signoff-validate: head {head[:8]} ({head_how}), output to {opts.out}")
    environment = {} if opts.host else None

    # a. calibrate on head's code
    calibration = calibrate(repo, head, opts, log)
    # b. plants: head sides with the calibrated delay
    log(
        "plants: "
        + ", ".join(f"{100 * t:g}% S@{head[:8]}+extra={n}" for t, n in calibration.chosen.items())
        + f" for S in {', '.join(PLANTED_SUBJECTS)} ({time.monotonic() - start:.0f} s)"
    )
    # c. sign-offs, in an order that keeps both kinds if the budget runs out
    runs = [
        Run(name, target, head, calibration.chosen[target] if target is not None else 0, index, order=i)
        for i, (name, target, index) in enumerate(run_order(opts.aa_runs, opts.targets))
    ]
    seps: list[Separate] = []
    last = 0.0  # the previous run's seconds: the estimate of the next one's
    for i, run in enumerate(runs, 1):
        elapsed = time.monotonic() - start
        if last and elapsed + last * 1.1 > opts.budget:
            run.skipped = f"time budget: {elapsed:.0f} s used of {opts.budget:.0f}, a run takes ~{last:.0f} s"
            log(f"[run {i}/{len(runs)}] {run.name}: {run.skipped}")
            continue
        log(f"[run {i}/{len(runs)}] {run.name}: {head[:8]} vs {planted_name('mrv2', head[:8], run.extra)}")
        try:
            run.result = paired.signoff_commits(
                repo,
                head,
                run.head,
                head_subject=lambda s, sha, extra=run.extra: planted_name(s, sha, extra),
                tier=opts.tier,
                sweeps=opts.sweeps or None,
                subjects=opts.subjects or None,
                samples=opts.samples,
                machine=opts.machine,
                alpha=opts.alpha,
                min_effect=opts.min_effect,
                min_abs_seconds=opts.min_abs_seconds,
                device=opts.device,
                l2=opts.l2,
                host=opts.host,
                environment=environment,
                log=log,
            )
        except Exception as exc:  # noqa: BLE001 - recorded in the matrix; the other runs go on
            traceback.print_exc()
            run.skipped = f"error: {type(exc).__name__}: {exc}".splitlines()[0][:200]
            continue
        last = run.result.seconds
        row = judge(run)
        log(
            f"[run {i}/{len(runs)}] {run.name}: exit {run.result.exit_code}, regressions touched {row['touched']}, "
            f"untouched {row['untouched']}: {row['verdict']} ({run.result.seconds:.0f} s; "
            f"{time.monotonic() - start:.0f} s so far)"
        )
        gc.collect()
        seps = separate_comparisons(runs, opts)
        write_outputs(opts.out, display_order(runs), seps, calibration, opts, head, head_how, time.monotonic() - start)
    # d. final outputs (also when every run was cut)
    seps = separate_comparisons(runs, opts)
    write_outputs(opts.out, display_order(runs), seps, calibration, opts, head, head_how, time.monotonic() - start)
    text = (opts.out / "detection-matrix.md").read_text()
    log(text)
    return 0 if overall(runs) == "PASS" else 1
