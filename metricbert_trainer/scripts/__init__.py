"""What the scripts under ``recipes/`` run: recipe arguments (YAML plus command-line overrides),
one training run end to end for every family (``run``, ``train``, ``ner``), and the page of their
options, as trl keeps its ``trl/scripts``. The studies behind the defaults live in ``studies/``,
outside the package."""
