"""One route module per dialect, plus ``system`` for health, metrics and the root."""
