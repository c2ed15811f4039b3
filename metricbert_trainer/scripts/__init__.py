"""What the scripts under ``recipes/`` run: recipe arguments (YAML plus command-line overrides),
one training run end to end (``train``) and the study runner (``study``), as trl keeps its
``trl/scripts``."""
