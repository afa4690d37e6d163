"""The names everything else uses: axes, tiers, stages, the base point, subjects, outcomes.

No torch and no Triton here: the results frame, sign-off and the dashboards import this module
and never the kernels. Every name below is **append-only**: results key on them, so an existing
name must never change meaning (add a new one instead).

One spelling per concept
------------------------
A point is named by the workload's own field names (:class:`specsample.workloads.Workload`, the
spec's symbols spelled out): ``num_reqs`` (R), ``num_speculative_steps`` (K), ``vocab_size`` (V),
``placeholder_density`` (phi), ``placeholder_pattern``; and by the ``subject`` under test. The
tiers, the results frame, sign-off and the dashboards all use these names.

asv parameter names are older and cannot be renamed without hiding a benchmark's history in
asv's site: ``variant``, ``K``, ``phi``, ``pattern``. :data:`ASV_PARAM_NAMES` maps one to the
other, and is read in exactly two places: the asv class factory (``benchmarks/common.py``) and
the results loader (``specsample.track.results``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ---- workload axes ---------------------------------------------------------------------------

PLACEHOLDER_TOKEN_ID = -1

MODES = ("greedy", "standard", "block", "synthetic")
DRAFTS = ("logits", "one-hot")
PATTERNS = ("trailing", "random", "all")

# The axes of a sampler point, in the order asv stores them; stage sweeps add "stage".
POINT_AXES = (
    "subject",
    "mode",
    "draft",
    "num_reqs",
    "num_speculative_steps",
    "vocab_size",
    "placeholder_density",
    "placeholder_pattern",
)
STAGE_AXIS = "stage"
AXES = (*POINT_AXES, STAGE_AXIS)

# The axes of vLLM's newer sampler paths (docs/paths.md), after POINT_AXES in the sweeps that vary
# them. A point that does not name one holds its default (PATH_DEFAULTS): every result recorded
# before these axes existed was measured at the defaults, which build the same inputs and call
# the same arguments as before.
LOGITS_SHAPES = ("gaussian", "heavy-tailed")  # how target and draft-noise rows are drawn
ROW_ENTROPIES = ("natural", "low", "mixed", "high")  # top-3 entropy of target rows vs FLy's 0.3
DRAFT_CACHES = ("replicated", "sharded")  # draft logits by request slot, or one TP rank's rows
PATH_AXES = (
    "logits_shape",
    "row_entropy",
    "masked_vocab_fraction",
    "skip_masked_vocab_blocks",
    "fly_window_size",
    "watermark",
    "draft_cache",
)
PATH_DEFAULTS = {
    "logits_shape": "gaussian",
    "row_entropy": "natural",
    "masked_vocab_fraction": 0.0,
    "skip_masked_vocab_blocks": False,
    "fly_window_size": 0,
    "watermark": False,
    "draft_cache": "replicated",
}
# The sampler paths a subject may or may not have (Capabilities.paths), and what turns each on.
PATHS = ("fly", "watermark", "skip_masked_vocab_blocks", "sharded_draft_cache")


def paths_of(point: dict) -> tuple[str, ...]:
    """The sampler paths (:data:`PATHS`) a point's path axes turn on; () at the defaults."""
    get = lambda axis: point.get(axis, PATH_DEFAULTS[axis])  # noqa: E731
    on = {
        "fly": int(get("fly_window_size")) > 0,
        "watermark": bool(get("watermark")),
        "skip_masked_vocab_blocks": bool(get("skip_masked_vocab_blocks")),
        "sharded_draft_cache": get("draft_cache") == "sharded",
    }
    return tuple(p for p in PATHS if on[p])


# Canonical name -> asv parameter name, where they differ (append-only; see the docstring).
ASV_PARAM_NAMES = {
    "subject": "variant",
    "num_speculative_steps": "K",
    "placeholder_density": "phi",
    "placeholder_pattern": "pattern",
}
FROM_ASV_PARAM_NAMES = {asv: name for name, asv in ASV_PARAM_NAMES.items()}

# Short labels for tables and axes: the spec's symbols.
SYMBOLS = {
    "num_reqs": "R",
    "num_speculative_steps": "K",
    "vocab_size": "V",
    "placeholder_density": "phi",
    "placeholder_pattern": "pattern",
}


def asv_name(axis: str) -> str:
    """The asv parameter name of a canonical axis (``"num_speculative_steps"`` -> ``"K"``)."""
    return ASV_PARAM_NAMES.get(axis, axis)


def axis_name(asv_param: str) -> str:
    """The canonical axis of an asv parameter name (``"phi"`` -> ``"placeholder_density"``)."""
    return FROM_ASV_PARAM_NAMES.get(asv_param, asv_param)


# ---- pipeline stages and tiers -------------------------------------------------------------

# The kernel launches of one call of the MRV2 pipeline, in order (spec section 2).
STAGES = ("stats", "cum_log_p", "residual_mass", "rejection", "resample", "insert")

TIERS = ("smoke", "quick", "nightly", "releases", "full")

# The base point of the one-axis sweeps: R=128, K=4, V=151936 (Qwen's vocab), phi=0.5,
# trailing placeholders, fp32 target, bf16 draft logits.
BASE_POINT = {
    "mode": "standard",
    "draft": "logits",
    "num_reqs": 128,
    "num_speculative_steps": 4,
    "vocab_size": 151936,
    "placeholder_density": 0.5,
    "placeholder_pattern": "trailing",
}

# ---- subjects ----------------------------------------------------------------------------------

# specsample's own subjects, in display order. specsample.subjects registers exactly these.
OUR_SUBJECTS = (
    "mrv2", "fast", "mrv2-pre50939", "torch-eager", "flashinfer", "flashinfer-kernel", "express", "mrv2-vllm",
)  # fmt: skip

# The subject every ratio is taken against.
BASELINE_SUBJECT = "mrv2"
# The metric whose value is a ratio to BASELINE_SUBJECT: derived from two subjects' latencies
# (the baseline's own is 1 by definition).
RATIO_METRIC = "track_ratio_to_mrv2"
# The metric whose value is a point's bytes over its latency, as a fraction of the copy bandwidth
# measured at the start of the same sweep (specsample.timing.copy_bandwidth).
BANDWIDTH_METRIC = "track_bandwidth_fraction"


@dataclass(frozen=True)
class SubjectName:
    """A parsed subject name.

    ``kind`` is one of:

    - ``"ours"``: one of :data:`OUR_SUBJECTS` (``"fast"``);
    - ``"ours@commit"``: one of ours at a commit of this repository (``"fast@916f2989"``);
    - ``"vllm-release"``: a vLLM release from the package index (``"vllm==0.33.0"``);
    - ``"vllm-ref"``: a commit of a vLLM checkout (``"vllm@main"``, ``"vllm@abc1234"``);
    - ``"vllm-installed"``: the vLLM installed in this environment (``"vllm"``);
    - ``"planted"``: any of those with a planted delay kernel, ``BASE+extra=N``
      (``specsample.subjects.planted``; for validating the sign-off and the bisection).
    """

    text: str
    kind: str
    base: str  # "fast", "vllm"
    version: str | None = None  # release, ref or commit


_RELEASE = re.compile(r"^vllm==(\d+\.\d+\.\d+(?:\.post\d+)?)$")
_REF = re.compile(r"^vllm@([^\s@]+)$")
_OURS_AT = re.compile(r"^([a-z0-9][a-z0-9-]*)@([0-9a-fA-F]{7,40})$")
_PLANTED = re.compile(r"^(.+)\+extra=(\d+)$")


def parse_subject(text: str) -> SubjectName:
    """Parse a subject name; ``ValueError`` naming the forms it accepts otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"subject: expected a name, got {type(text).__name__}")
    if text in OUR_SUBJECTS:
        return SubjectName(text, "ours", text)
    if text == "vllm":
        return SubjectName(text, "vllm-installed", "vllm")
    if m := _PLANTED.match(text):
        parse_subject(m.group(1))
        return SubjectName(text, "planted", m.group(1), m.group(2))
    if m := _RELEASE.match(text):
        return SubjectName(text, "vllm-release", "vllm", m.group(1))
    if m := _REF.match(text):
        return SubjectName(text, "vllm-ref", "vllm", m.group(1))
    if (m := _OURS_AT.match(text)) and m.group(1) in OUR_SUBJECTS:
        return SubjectName(text, "ours@commit", m.group(1), m.group(2))
    raise ValueError(
        f"subject: expected one of {', '.join(OUR_SUBJECTS)}, NAME@COMMIT (one of those at a "
        f"commit of this repository), vllm==X.Y.Z (a release), vllm@REF (a commit of the vLLM "
        f"checkout given by --vllm-repo or $SPECSAMPLE_VLLM_REPO) or vllm (the installed one); "
        f"got {text!r}"
    )


def release_version(subject: object) -> str | None:
    """``"0.27.1"`` for the subject ``"vllm==0.27.1"``; None for any other subject or name."""
    try:
        parsed = parse_subject(subject)
    except ValueError:
        return None
    return parsed.version if parsed.kind == "vllm-release" else None


def subject_sort_key(name: str) -> tuple:
    """Display order: ours first (in :data:`OUR_SUBJECTS` order), then vLLM releases by
    version, then refs and the installed vLLM."""
    try:
        parsed = parse_subject(name)
    except ValueError:
        return (9, name)
    if parsed.kind == "ours":
        return (0, OUR_SUBJECTS.index(name))
    if parsed.kind == "ours@commit":
        return (1, OUR_SUBJECTS.index(parsed.base), parsed.version)
    if parsed.kind == "vllm-release":
        return (2, release_key(parsed.version))
    return (3, name)


def release_key(version: str) -> tuple[int, ...]:
    """``"0.27.1"`` -> ``(0, 27, 1)``; ``".postN"`` sorts after its release."""
    main, _, post = version.partition(".post")
    return (*(int(p) for p in main.split(".")), int(post or -1))


# ---- what a point's outcome was ----------------------------------------------------------------

# status of a point in the results frame (asv's failed / skipped, plus our crash record)
STATUSES = ("ok", "failed", "skipped", "crashed")

# What a subject's outputs were, checked once at every point it is timed (specsample.semantics):
SEMANTICS = (
    "same draws",  # the same tokens and counts as mrv2 on the same inputs
    "same semantics, other stream",  # placeholder and range semantics hold; other random draws
    "violates placeholder semantics",  # accepted at or after a -1, or tokens / counts out of range
    "crashed",  # the subject's process died (a fault or a hang) at this point
    "violates path semantics",  # a sampler path's own rule broken (FLy deferral, watermark determinism)
)


# The asv machine name of a CPU run under Triton's interpreter (the smoke tier without a GPU).
CPU_INTERPRETER_MACHINE = "cpu-interpreter"
