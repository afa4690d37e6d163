"""The work behind each ``specsample`` command, one module per group of commands; :mod:`specsample.cli`
parses the arguments and calls the ``cmd_*`` function here that each subcommand names.

- :mod:`.common`: the usage error (one line, exit 2), the repository root, GPU and subject checks;
- :mod:`.compare`: ``compare``;
- :mod:`.bench`: ``bench``, ``nightly``, ``backfill``, ``dashboard``, ``regressions``;
- :mod:`.signoff`: ``signoff``, ``bisect``, ``signoff-validate``, ``exactness``;
- :mod:`.vllm`: ``vllm fetch|list``, ``gpuinfo``;
- :mod:`.devtools`: ``tune``, ``noise-floor``, ``goals``.

No torch at import: each command imports what it runs.
"""
