"""``make mutate`` (``python -m bench.mutation.mutate``): bugs planted in a copy of the sources,
against the difftest corpora and the fuzzers. ``mutant`` says what a mutant is, ``mutants``
gathers the catalogue (``mutants_front``, ``mutants_passes``, ``mutants_lowering``),
``mutate_report`` writes ``mutate_results.md``."""
