"""``python -m metricbert_trainer.cli``: the ``metricbert`` command."""

from metricbert_trainer.cli import main

raise SystemExit(main())
